//! Webhook configurations for a [`super::WebhookServer`]: the
//! `ValidatingWebhookConfiguration` / `MutatingWebhookConfiguration` that
//! point the API server at one of its paths, trusting its CA bundle.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What a webhook is called for: `(apiGroup, apiVersion, resource)` on
/// CREATE and UPDATE.
pub type Target<'a> = (&'a str, &'a str, &'a str);

fn rules(targets: &[Target<'_>]) -> Vec<RuleWithOperations> {
    targets
        .iter()
        .map(|(g, v, r)| RuleWithOperations {
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            api_groups: Some(vec![g.to_string()]),
            api_versions: Some(vec![v.to_string()]),
            resources: Some(vec![r.to_string()]),
            scope: None,
        })
        .collect()
}

fn client_config(url: &str, ca_bundle: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(url.to_string()),
        ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
        service: None,
    }
}

/// A client config calling Service `namespace/name` on port 443 at `path`,
/// with no CA bundle (cert-manager's CA injector, or
/// [`inject_ca_bundle`], fills it in).
pub fn service_client_config(namespace: &str, name: &str, path: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: None,
        ca_bundle: None,
        service: Some(ServiceReference {
            namespace: namespace.to_string(),
            name: name.to_string(),
            path: Some(path.to_string()),
            port: Some(443),
        }),
    }
}

/// [`validating_configuration`] with any client config (e.g.
/// [`service_client_config`]) and operations.
pub fn validating_configuration_with(
    name: &str,
    webhook: &str,
    client: WebhookClientConfig,
    targets: &[Target<'_>],
) -> ValidatingWebhookConfiguration {
    let mut c = validating_configuration(name, webhook, "", "", targets);
    if let Some(w) = c.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config = client;
    }
    c
}

/// [`mutating_configuration`] with any client config.
pub fn mutating_configuration_with(
    name: &str,
    webhook: &str,
    client: WebhookClientConfig,
    targets: &[Target<'_>],
) -> MutatingWebhookConfiguration {
    let mut c = mutating_configuration(name, webhook, "", "", targets);
    if let Some(w) = c.webhooks.as_mut().and_then(|w| w.first_mut()) {
        w.client_config = client;
    }
    c
}

/// Set `caBundle` to `ca_bundle` in every webhook of the mutating and
/// validating configurations matching `label_selector` (what an operator
/// that makes its own serving certificate does at start-up, instead of
/// cert-manager's CA injector); returns how many configurations changed.
/// Needs `get`, `list` and `patch` on both kinds.
pub async fn inject_ca_bundle(
    client: kube::Client,
    label_selector: &str,
    ca_bundle: &str,
) -> Result<usize, kube::Error> {
    use base64::Engine as _;
    use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
    let lp = ListParams::default().labels(label_selector);
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_bundle);
    let kinds = [
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
    ];
    let mut changed = 0;
    for kind in kinds {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        for c in api.list(&lp).await? {
            let Some(webhooks) = c.data.get("webhooks").and_then(|w| w.as_array()) else {
                continue;
            };
            let mut patched = webhooks.clone();
            for w in &mut patched {
                w["clientConfig"]["caBundle"] = serde_json::Value::String(bundle.clone());
            }
            if &patched == webhooks {
                continue;
            }
            let name = c.metadata.name.clone().unwrap_or_default();
            let body = serde_json::json!({"webhooks": patched});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await?;
            changed += 1;
        }
    }
    Ok(changed)
}

/// A ValidatingWebhookConfiguration `name` with one webhook `webhook`
/// (a DNS-style name such as `team.example.com`) at `url`, failurePolicy
/// Fail, sideEffects None, AdmissionReview v1.
pub fn validating_configuration(
    name: &str,
    webhook: &str,
    url: &str,
    ca_bundle: &str,
    targets: &[Target<'_>],
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: webhook.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            client_config: client_config(url, ca_bundle),
            rules: Some(rules(targets)),
            ..ValidatingWebhook::default()
        }]),
    }
}

/// The mutating counterpart of [`validating_configuration`]
/// (reinvocationPolicy Never).
pub fn mutating_configuration(
    name: &str,
    webhook: &str,
    url: &str,
    ca_bundle: &str,
    targets: &[Target<'_>],
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: webhook.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            client_config: client_config(url, ca_bundle),
            rules: Some(rules(targets)),
            ..MutatingWebhook::default()
        }]),
    }
}
