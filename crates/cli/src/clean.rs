//! `kubeforge clean`: remove what a dead `kubeforge up --container-nodes`
//! left on this machine, by the record in its data directory and by the
//! cluster id in the names of its links, tables and cgroups
//! (`kubeforge_node::footprint`). A live cluster (its data directory
//! locked) is never touched.
//!
//! ```text
//! kubeforge clean                      # the cluster in ./.kubeforge
//! kubeforge clean --data-dir /srv/kf   # another one
//! kubeforge clean --name dev           # the one `up --name dev` started
//! kubeforge clean --all                # every dead one on this machine
//! ```
//!
//! Exit status: 0 when everything was removed or there was nothing; 1 when
//! something could not be removed (each named with the reason; the next
//! clean retries it); 2 when the data directory belongs to a live cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kubeforge_node::NodeError;
use kubeforge_node::footprint::{self, CleanReport};

/// `kubeforge clean`'s arguments.
#[derive(Args, Clone)]
pub struct CleanArgs {
    /// The data directory of the cluster to clean up after.
    #[arg(long, default_value = ".kubeforge", conflicts_with = "all")]
    data_dir: PathBuf,
    /// The cluster `up --name NAME` started.
    #[arg(long, conflicts_with_all = ["data_dir", "all"], value_parser = crate::clusterdir::named)]
    name: Option<PathBuf>,
    /// Every dead cluster on this machine (live ones are listed and left
    /// alone).
    #[arg(long)]
    all: bool,
}

/// Print what a clean of `what` did; whether everything went.
fn print(what: &str, report: &CleanReport) -> bool {
    if report.is_empty() {
        println!("{what}: nothing to clean");
        return true;
    }
    for line in &report.removed {
        println!("{what}: removed {line}");
    }
    for (item, why) in &report.failed {
        eprintln!("{what}: cannot remove {item}: {why}");
    }
    report.failed.is_empty()
}

/// Run `kubeforge clean`.
pub fn run(args: CleanArgs) -> ExitCode {
    if args.all {
        let found = footprint::clean_all();
        if found.is_empty() {
            println!("nothing to clean");
            return ExitCode::SUCCESS;
        }
        let mut ok = true;
        for f in found {
            let what = match &f.dir {
                Some(d) => format!("cluster {} ({})", f.id, d.display()),
                None => format!("cluster {}", f.id),
            };
            match f.outcome {
                Ok(report) => ok &= print(&what, &report),
                Err(why) => println!("{what}: left alone: {why}"),
            }
        }
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let dir = args.name.unwrap_or(args.data_dir);
    let what = dir.display().to_string();
    match footprint::clean(&dir) {
        Ok(report) => {
            if print(&what, &report) {
                ExitCode::SUCCESS
            } else {
                eprintln!("run `kubeforge clean` again once the reasons above are gone");
                ExitCode::from(1)
            }
        }
        Err(e @ NodeError::InUse { .. }) => {
            eprintln!("error: {e}; nothing was touched");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
