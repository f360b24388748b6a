//! ImageLocality: prefers nodes that already have the pod's images, weighed
//! by image size and by how many nodes have it (so one node holding a popular
//! image does not attract every pod), weight 1.

use super::helper::plugin;
use crate::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, NodeInfo, PodInfo, PreScorePlugin, ScorePlugin,
    Snapshot, Status,
};

const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The ImageLocality plugin.
pub struct ImageLocality;
plugin!(
    ImageLocality,
    "ImageLocality",
    [pre_score, score],
    events = vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdate]
);

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        if node.images.is_empty() || pod.images.is_empty() {
            return (0, Status::success());
        }
        let Some(spread) = state.read::<ImageSpread>(SPREAD_KEY) else {
            return (0, Status::success());
        };
        let mut sum = 0i64;
        for img in &pod.images {
            if let Some(size) = node.images.get(img) {
                let (have, total) = (spread.count(img), spread.total);
                let factor = if total == 0 {
                    1.0
                } else {
                    have as f64 / total as f64
                };
                sum += (*size as f64 * factor) as i64;
            }
        }
        let max = MAX_CONTAINER_THRESHOLD * pod.images.len() as i64;
        let sum = sum.clamp(MIN_THRESHOLD, max);
        (
            MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD),
            Status::success(),
        )
    }
}

/// Image spread for the cycle: how many nodes hold each image.
#[derive(Clone)]
pub struct ImageSpread {
    /// (image, nodes holding it).
    pub counts: Vec<(String, usize)>,
    /// All nodes.
    pub total: usize,
}

impl ImageSpread {
    fn count(&self, img: &str) -> usize {
        self.counts
            .iter()
            .find(|(i, _)| i == img)
            .map_or(0, |(_, c)| *c)
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        if pod.images.is_empty() {
            return Status::skip();
        }
        let counts: Vec<(String, usize)> = pod
            .images
            .iter()
            .map(|i| (i.clone(), snapshot.image_num_nodes(i)))
            .collect();
        if counts.iter().all(|(_, c)| *c == 0) {
            return Status::skip(); // no node has any of the images
        }
        state.write(
            SPREAD_KEY,
            ImageSpread {
                counts,
                total: snapshot.nodes().len(),
            },
        );
        Status::success()
    }
}

/// CycleState key for [`ImageSpread`].
pub const SPREAD_KEY: &str = "ImageLocality";
