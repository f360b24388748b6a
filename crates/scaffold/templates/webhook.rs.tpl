//! Admission webhooks for {{kind}} ({{fqgroup}}/{{version}}). This file is
//! yours: `kubeforge create webhook` writes it once; `src/webhooks/mod.rs`
//! (generated) registers these functions on the webhook server.

#[allow(unused_imports)]
use kube::core::admission::{AdmissionRequest, Operation};
use kubeforge_runtime::webhook::Verdict;

use crate::api::{{group}}::{{version}}::{{kind}};
{{defaulting}}{{validation}}
