//! The Container Runtime Interface client: CRI v1's RuntimeService and
//! ImageService (the `k8s-cri` crate's generated gRPC clients) over the
//! runtime's Unix socket, as the kubelet dials containerd.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

pub use k8s_cri::v1 as api;

/// What a CRI call failed with: the runtime's gRPC status (an unreachable
/// socket is `Unavailable`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CriError(#[from] pub tonic::Status);

impl CriError {
    /// The gRPC code.
    pub fn code(&self) -> tonic::Code {
        self.0.code()
    }

    /// The runtime's message without gRPC's decoration.
    pub fn message(&self) -> &str {
        self.0.message()
    }
}

/// A connection to one container runtime; cheap to clone (one HTTP/2
/// channel underneath).
#[derive(Clone, Debug)]
pub struct Cri {
    /// RuntimeService: sandboxes, containers, exec, status.
    pub runtime: RuntimeServiceClient<Channel>,
    /// ImageService: pulls, image status, file-system info.
    pub image: ImageServiceClient<Channel>,
    socket: PathBuf,
}

impl Cri {
    /// Dial the runtime's socket (lazily: the first call connects, and a
    /// runtime restarted under us is redialled by the channel).
    pub fn connect(socket: &Path) -> Cri {
        let path = socket.to_path_buf();
        let dial = path.clone();
        // The URI is only a placeholder: the connector ignores it.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let dial = dial.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(dial).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        Cri {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(16 << 20),
            image: ImageServiceClient::new(channel).max_decoding_message_size(16 << 20),
            socket: path,
        }
    }

    /// The socket this client dials.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The runtime's name and version (`containerd`, `v1.6.20~ds1`).
    pub async fn version(&self) -> Result<api::VersionResponse, CriError> {
        let mut rt = self.runtime.clone();
        Ok(rt
            .version(api::VersionRequest {
                version: "v1".into(),
            })
            .await?
            .into_inner())
    }

    /// The runtime's conditions (RuntimeReady, NetworkReady).
    pub async fn status(&self) -> Result<Vec<api::RuntimeCondition>, CriError> {
        let mut rt = self.runtime.clone();
        let status = rt
            .status(api::StatusRequest { verbose: false })
            .await?
            .into_inner()
            .status
            .unwrap_or_default();
        Ok(status.conditions)
    }

    /// Wait until the runtime answers `Version`, for at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<api::VersionResponse, CriError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.version().await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}
