//! Webhook configurations for a [`super::WebhookServer`]: the
//! `ValidatingWebhookConfiguration` / `MutatingWebhookConfiguration` that
//! point the API server at one of its paths, trusting its CA bundle.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
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
