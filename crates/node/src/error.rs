//! The node agent's errors.

use std::path::PathBuf;

use crate::cri::CriError;

/// What went wrong starting or running the node's parts.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A program the node needs is not installed.
    #[error("{program} is not installed: {hint}")]
    Missing {
        /// The program.
        program: String,
        /// What to install.
        hint: String,
    },
    /// Container nodes run containers, which needs root.
    #[error(
        "running containers needs root (runc creates namespaces and cgroups): run as root, or use simulated nodes only"
    )]
    NotRoot,
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Another live kubeforge holds the data directory.
    #[error(
        "the data directory {} is in use by a running kubeforge (pid {pid}); stop it first, or pass another --data-dir",
        dir.display()
    )]
    InUse {
        /// The data directory.
        dir: PathBuf,
        /// The holder's process id, as it recorded it.
        pid: String,
    },
    /// A process we started exited before it was ready.
    #[error("{program} exited before it was ready ({status}); its log is {}", log.display())]
    Exited {
        /// The program.
        program: String,
        /// How it ended.
        status: String,
        /// Where it wrote what it said.
        log: PathBuf,
    },
    /// The container runtime refused a call.
    #[error("container runtime: {0}")]
    Cri(#[from] CriError),
    /// The image registry refused or could not be reached.
    #[error("image registry: {0}")]
    Registry(String),
    /// An image could not be built.
    #[error("building {image}: {reason}")]
    Build {
        /// The image.
        image: String,
        /// Why.
        reason: String,
    },
    /// The API server refused a call.
    #[error("API server: {0}")]
    Kube(#[from] kube::Error),
    /// The cluster DNS server cannot start.
    #[error("cluster DNS: {0}")]
    Dns(#[from] crate::dns::DnsError),
}

impl NodeError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> NodeError {
        NodeError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<tonic::Status> for NodeError {
    fn from(s: tonic::Status) -> NodeError {
        NodeError::Cri(CriError(s))
    }
}
