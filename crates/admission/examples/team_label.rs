//! A custom validating webhook in under 40 lines: ConfigMaps need a `team`
//! label. Registers itself with the cluster in $KUBECONFIG, e.g. `kubeforge up`.
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration as Config;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::core::admission::AdmissionRequest;
use kubeforge_runtime::webhook::{Target, Verdict, WebhookServer, validating_configuration};

const CONFIGMAPS: [Target<'static>; 1] = [("", "v1", "configmaps")];

fn validate(req: &AdmissionRequest<ConfigMap>) -> Verdict {
    let labels = req.object.as_ref().and_then(|c| c.metadata.labels.as_ref());
    match labels.and_then(|l| l.get("team")) {
        Some(_) => Verdict::allow(),
        None => Verdict::deny("every ConfigMap needs a team label"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = WebhookServer::builder()
        .addr("127.0.0.1:0".parse()?)
        .cert_dir(std::env::temp_dir().join(format!("team-label-{}", std::process::id())))
        .validator("/team", validate)
        .bind()
        .await?;
    let (url, ca) = (server.url("/team"), server.ca_bundle());
    let cfg = validating_configuration("team-label", "team.example.com", &url, ca, &CONFIGMAPS);
    let api: Api<Config> = Api::all(kube::Client::try_default().await?);
    let pp = PatchParams::apply("team-label");
    api.patch("team-label", &pp, &Patch::Apply(&cfg)).await?;
    println!("team-label webhook ready on {}", server.local_addr());
    let stop = async { tokio::signal::ctrl_c().await.unwrap_or_default() };
    server.run(stop).await?;
    Ok(())
}
