//! `kubeforge authz`: access-policy tools against any cluster.
//!
//! `kubeforge authz explain --as USER [--as-group G]… VERB RESOURCE [NAME]
//! [-n NS]` asks the cluster, with a SubjectAccessReview, whether the user
//! may, and prints the decision and its path: which binding allowed or
//! denied it, through which role and parents, by which rule — or, when
//! nothing allowed it, why each kubeforge binding naming the user did not
//! apply. RESOURCE is `pods`, `deployments.apps`, `pods/log` or
//! `deployments.apps/scale`; a RESOURCE starting with `/` is a
//! non-resource URL. Exits 0 when allowed, 1 when not (as `kubectl auth
//! can-i`), 2 on bad arguments.
//!
//! ```text
//! kubeforge authz explain --as bob delete pods web -n dev
//! ```

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// `kubeforge authz` arguments.
#[derive(Args)]
pub struct AuthzArgs {
    #[command(subcommand)]
    command: AuthzCommand,
}

#[derive(Subcommand)]
enum AuthzCommand {
    /// Say whether a user may do something, and why (which binding, role,
    /// parents and rule; or why each candidate binding did not apply).
    Explain(ExplainArgs),
    /// Serve the cluster's access policies as a Kubernetes authorization
    /// webhook (SubjectAccessReview v1 at /authorize over HTTPS).
    Webhook(crate::authz_webhook::WebhookArgs),
}

#[derive(Args)]
struct ExplainArgs {
    /// The user asking.
    #[arg(long = "as", value_name = "USER")]
    user: String,
    /// A group of the user (repeat for several).
    #[arg(long = "as-group", value_name = "GROUP")]
    groups: Vec<String>,
    /// The client address to check `sourceCIDRs` conditions against.
    #[arg(long, value_name = "IP")]
    source: Option<std::net::IpAddr>,
    /// Namespace of the request.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Kubeconfig of the cluster (else $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The verb (`get`, `list`, `create`, `delete`, `impersonate`, …).
    verb: String,
    /// `pods`, `deployments.apps`, `pods/log`, or a non-resource URL (`/healthz`).
    resource: String,
    /// The object's name.
    name: Option<String>,
}

/// Run `kubeforge authz`.
pub async fn run(args: AuthzArgs) -> Result<()> {
    match args.command {
        AuthzCommand::Explain(a) => explain(a).await,
        AuthzCommand::Webhook(a) => crate::authz_webhook::run(a).await,
    }
}

/// `resource[.group][/subresource]` → (group, resource, subresource).
fn split_resource(s: &str) -> Option<(String, String, String)> {
    let (main, sub) = s.split_once('/').unwrap_or((s, ""));
    let (resource, group) = main.split_once('.').unwrap_or((main, ""));
    if resource.is_empty() || sub.contains('/') {
        return None;
    }
    Some((group.to_string(), resource.to_string(), sub.to_string()))
}

fn usage_error(message: String) -> ! {
    use clap::CommandFactory;
    crate::Cli::command()
        .error(clap::error::ErrorKind::InvalidValue, message)
        .exit()
}

async fn explain(a: ExplainArgs) -> Result<()> {
    let mut spec = SubjectAccessReviewSpec {
        user: Some(a.user.clone()),
        groups: (!a.groups.is_empty()).then(|| a.groups.clone()),
        ..Default::default()
    };
    if let Some(ip) = a.source {
        spec.extra = Some(
            [(
                kubeforge_authz::access::SOURCE_ADDRESS_EXTRA.to_string(),
                vec![ip.to_string()],
            )]
            .into(),
        );
    }
    if a.resource.starts_with('/') {
        if a.name.is_some() || a.namespace.is_some() {
            usage_error(format!(
                "{:?} is a non-resource URL: it takes no NAME and no --namespace",
                a.resource
            ));
        }
        spec.non_resource_attributes = Some(NonResourceAttributes {
            path: Some(a.resource.clone()),
            verb: Some(a.verb.clone()),
        });
    } else {
        let Some((group, resource, subresource)) = split_resource(&a.resource) else {
            usage_error(format!(
                "RESOURCE {:?} is not `resource[.group][/subresource]` (e.g. pods, deployments.apps, pods/log) or a URL starting with /",
                a.resource
            ));
        };
        spec.resource_attributes = Some(ResourceAttributes {
            namespace: a.namespace.clone(),
            verb: Some(a.verb.clone()),
            group: Some(group),
            resource: Some(resource),
            subresource: (!subresource.is_empty()).then_some(subresource),
            name: a.name.clone(),
            ..Default::default()
        });
    }
    let client = crate::kubeclient::client(a.kubeconfig.as_deref()).await?;
    let reviews: Api<SubjectAccessReview> = Api::all(client);
    let review = SubjectAccessReview {
        spec,
        ..Default::default()
    };
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .context("asking the cluster (a SubjectAccessReview)")?;
    let status = answer.status.unwrap_or_default();
    let decision = if status.allowed {
        "allowed"
    } else if status.denied == Some(true) {
        "denied"
    } else {
        "not allowed (no policy allows it)"
    };
    println!("{decision}");
    let reason = status.reason.unwrap_or_default();
    for line in reason.lines().filter(|l| !l.is_empty()) {
        println!("  {line}");
    }
    if let Some(e) = status.evaluation_error.filter(|e| !e.is_empty()) {
        println!("  evaluation error: {e}");
    }
    if !status.allowed {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_resource;

    #[test]
    fn resources_split_as_kubectl_writes_them() {
        let s = |a: &str, b: &str, c: &str| Some((a.to_string(), b.to_string(), c.to_string()));
        assert_eq!(split_resource("pods"), s("", "pods", ""));
        assert_eq!(
            split_resource("deployments.apps/scale"),
            s("apps", "deployments", "scale")
        );
        assert_eq!(
            split_resource("accessroles.authz.kubeforge.dev"),
            s("authz.kubeforge.dev", "accessroles", "")
        );
        assert_eq!(split_resource("pods/log/x"), None);
        assert_eq!(split_resource(".apps"), None);
    }
}
