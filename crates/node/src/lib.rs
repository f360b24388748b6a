//! kubeforge's node agent, in the kubelet's role: it registers a Node with
//! any API server (as a kube-rs client only) and runs the pods bound to it
//! through the Container Runtime Interface — containerd with runc, started
//! privately by [`containerd::Containerd`] — with images built from this
//! machine's programs into a local registry ([`image`], [`registry`]).
//!
//! ```text
//! kubeforge up --container-nodes 2       # containerd, a registry, two agents
//! kubeforge image build busybox:1.36     # an image from the host's busybox
//! kubeforge node --cri-socket PATH       # an agent for a runtime already running
//! ```
//!
//! The parts: [`cri`] (the gRPC client), [`pod`] (a pod spec in CRI's
//! terms), [`env`](mod@env) and [`volumes`] (what containers get), [`worker`] (one
//! pod's lifecycle), [`status`] (the pod status the kubelet writes),
//! [`logs`] (CRI log files read with kube's options), [`agent`] (the Node,
//! its Lease, the pod watch) and the agent's HTTPS API (`server`); beside
//! the agent, Services as kube-proxy makes them ([`proxy`]) and the
//! cluster DNS server ([`dns`]).

pub mod agent;
pub mod containerd;
pub mod cri;
pub mod dns;
pub mod env;
pub mod error;
pub mod events;
pub mod footprint;
pub mod host;
pub mod image;
pub mod local;
pub mod logs;
pub mod network;
pub mod pod;
pub mod probes;
pub mod proxy;
pub mod registry;
mod server;
pub mod stats;
pub mod status;
pub mod volumes;
pub mod worker;

pub use agent::{AgentConfig, RunningAgent, start};
pub use error::NodeError;
