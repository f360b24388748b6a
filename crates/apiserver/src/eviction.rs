//! `pods/{name}/eviction`: deleting a pod only when its
//! PodDisruptionBudget allows it, as kube-apiserver's `EvictionREST` does
//! (what `kubectl drain` and cluster autoscalers call).
//!
//! The body is a `policy/v1` (or `v1beta1`) Eviction. A terminal,
//! pending or already terminating pod is deleted without looking at
//! budgets. Otherwise the pod's one matching budget (more than one is a
//! 500; none deletes at once) must allow a disruption: a budget whose
//! status is older than its spec, or that allows none, answers 429
//! TooManyRequests with kube's message and cause; else its
//! `disruptionsAllowed` is decremented and the pod recorded under
//! `disruptedPods` (so the disruption controller stops counting it as
//! healthy) before the pod is deleted. A pod that is not ready is deleted
//! without using up the budget while the budget is met (or always, with
//! `unhealthyPodEvictionPolicy: AlwaysAllow`), with the pod's
//! resourceVersion as precondition so it cannot have become ready
//! meanwhile.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, Response};
use kubeforge_apimachinery::disruption;
use kubeforge_apimachinery::labels::Selector;
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec::{self, Accept, BodyType};
use crate::context::{Ctx, Sub};
use crate::error::{ApiError, ApiResult, Cause};
use crate::object;
use crate::request::Query;
use crate::rest::{self, DeleteOptions};

/// More entries than this in a budget's `disruptedPods` refuse evictions
/// (kube's `MaxDisruptedPodSize`): the controller is not keeping up.
const MAX_DISRUPTED_PODS: usize = 2000;

/// Attempts on a conflict (kube's `EvictionsRetry`: 20 steps of 500 ms).
const ATTEMPTS: usize = 20;
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// The field manager of the budget's status write, as kube-apiserver's
/// loopback client records it.
const MANAGER: &str = "kube-apiserver";

/// How kube names budgets in a Forbidden message (`policy.Resource("poddisruptionbudget")`).
const POLICY_SINGULAR: crate::error::GroupResource<'static> = crate::error::GroupResource {
    group: "policy",
    resource: "poddisruptionbudget",
};

/// Serve `POST pods/{name}/eviction`.
pub(crate) async fn evict(ctx: &mut Ctx<'_>, body: &[u8]) -> ApiResult<Response<ApiBody>> {
    let name = ctx.path_name()?.to_string();
    crate::admission::admit_pod_removal(ctx, &name, true)?;
    let eviction = decode(ctx, body)?;
    if eviction.pointer("/metadata/name").and_then(Value::as_str) != Some(name.as_str()) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    if let Some(ns) = eviction
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        && Some(ns) != ctx.ns.as_deref()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let options = match eviction.get("deleteOptions").filter(|v| !v.is_null()) {
        Some(v) => DeleteOptions::from_value(v).checked()?,
        None => DeleteOptions::default(),
    };
    let dry_run = ctx.dry_run() || options.dry_run;
    let precondition_given = options.resource_version.is_some();

    // Pods that can be deleted without a budget: retried on conflicts
    // unless the caller gave a resourceVersion precondition.
    let mut attempt = 0;
    let pod = loop {
        attempt += 1;
        let (pod, rv) = read_pod(ctx, &name)?;
        if !budget_ignored(&pod) {
            break (pod, rv);
        }
        let mut opts = options.clone();
        if enforce_resource_version(&pod) && !precondition_given {
            opts.resource_version = Some(rv.to_string());
        }
        match rest::delete_object(ctx, &name, &opts).await {
            Ok(_) => return Ok(success()),
            Err(e) if e.code == 409 && !precondition_given && attempt < ATTEMPTS => {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            Err(e) => return Err(e),
        }
    };
    let (pod, pod_rv) = pod;

    let budgets = budgets_of(ctx, &pod)?;
    if budgets.len() > 1 {
        return Err(ApiError::new(
            500,
            "",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ));
    }
    let mut pinned = false;
    let mut budget_name = String::new();
    if let Some((key, first)) = budgets.into_iter().next() {
        budget_name = object::meta_str(&first.1, "name")
            .unwrap_or_default()
            .to_string();
        if !pod_ready(&pod) && unready_may_go(&first.1) {
            pinned = true;
        } else {
            take_from_budget(ctx, &key, first, &budget_name, &name, dry_run).await?;
        }
    }

    let mut opts = options.clone();
    if pinned {
        opts.resource_version = Some(pod_rv.to_string());
    }
    match rest::delete_object(ctx, &name, &opts).await {
        Ok(_) => Ok(success()),
        Err(e) if e.code == 409 && pinned && !precondition_given => {
            Err(still_processing(&budget_name))
        }
        Err(e) => Err(e),
    }
}

/// The Eviction body: JSON, YAML or protobuf, kind Eviction of policy/v1
/// or policy/v1beta1 (both accepted, as kube's `AcceptsGroupVersion`).
fn decode(ctx: &Ctx<'_>, body: &[u8]) -> ApiResult<Value> {
    let ty = match codec::body_type(&ctx.headers)? {
        t @ (BodyType::Yaml | BodyType::Protobuf) => t,
        _ => BodyType::Json,
    };
    let v = codec::decode(body, ty)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    match v.get("kind").and_then(Value::as_str) {
        None | Some("" | "Eviction") => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind (Eviction)"
            )));
        }
    }
    match v.get("apiVersion").and_then(Value::as_str) {
        None | Some("" | "policy/v1" | "policy/v1beta1") => {}
        Some(av) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version (policy/v1)"
            )));
        }
    }
    if v.get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    if v.get("deleteOptions")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::bad_request("deleteOptions must be an object"));
    }
    Ok(v)
}

/// kube's answer to a successful eviction: a `Status` Success, 201.
fn success() -> Response<ApiBody> {
    codec::respond_created_status()
}

fn read_pod(ctx: &Ctx<'_>, name: &str) -> ApiResult<(Value, u64)> {
    let kv = ctx
        .server
        .store()
        .get(&ctx.key(name))
        .ok_or_else(|| ApiError::not_found(ctx.def.gr(), name))?;
    let pod = serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((pod, kv.mod_revision))
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn terminating(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// A pod whose eviction disrupts nothing (`canIgnorePDB`): finished,
/// pending or already terminating.
fn budget_ignored(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || terminating(pod)
}

/// Whether the direct deletion is pinned to the pod's resourceVersion
/// (`shouldEnforceResourceVersion`): everything but finished and
/// terminating pods, which cannot turn ready.
fn enforce_resource_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !terminating(pod)
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn status_int(pdb: &Value, field: &str) -> i64 {
    pdb.get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// A not-ready pod may go without using up the budget: always with
/// `AlwaysAllow`, else while the budget is met (`IfHealthyBudget`).
fn unready_may_go(pdb: &Value) -> bool {
    if pdb
        .pointer("/spec/unhealthyPodEvictionPolicy")
        .and_then(Value::as_str)
        == Some("AlwaysAllow")
    {
        return true;
    }
    let desired = status_int(pdb, "desiredHealthy");
    status_int(pdb, "currentHealthy") >= desired && desired > 0
}

/// The budgets of the pod's namespace whose selector matches it, with
/// their keys and revisions; an invalid, empty or absent selector matches
/// nothing.
fn budgets_of(ctx: &Ctx<'_>, pod: &Value) -> ApiResult<Vec<(String, (u64, Value))>> {
    let def = pdb_def(ctx)?;
    let labels = pod.pointer("/metadata/labels");
    let mut out = Vec::new();
    let page = ctx
        .server
        .store()
        .range(&def.collection_prefix(ctx.ns.as_deref()), None, 0);
    for kv in page.kvs {
        let Ok(pdb) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let sel = pdb
            .pointer("/spec/selector")
            .map(Selector::from_label_selector);
        let selects = matches!(&sel, Some(Ok(s)) if !s.is_everything() && !s.is_nothing() && s.matches(&labels));
        if selects {
            out.push((kv.key.to_string(), (kv.mod_revision, pdb)));
        }
    }
    Ok(out)
}

fn pdb_def(ctx: &Ctx<'_>) -> ApiResult<std::sync::Arc<crate::registry::ResourceDef>> {
    ctx.server
        .registry()
        .get("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not registered"))
}

/// kube's 429 while a budget's status lags its spec.
fn still_processing(name: &str) -> ApiError {
    let mut e = ApiError::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        10,
    );
    e.details.causes.push(Cause {
        reason: "DisruptionBudget".into(),
        message: format!("The disruption budget {name} is still being processed by the server."),
        field: String::new(),
    });
    e
}

/// Check the budget allows one more disruption and record it
/// (`checkAndDecrement`), re-reading the budget on a conflict.
async fn take_from_budget(
    ctx: &Ctx<'_>,
    key: &str,
    (mut rev, mut pdb): (u64, Value),
    name: &str,
    pod: &str,
    dry_run: bool,
) -> ApiResult<()> {
    let def = pdb_def(ctx)?;
    for _ in 0..ATTEMPTS {
        let generation = pdb
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if status_int(&pdb, "observedGeneration") < generation {
            return Err(still_processing(name));
        }
        let allowed = status_int(&pdb, "disruptionsAllowed");
        if allowed < 0 {
            return Err(ApiError::forbidden(
                POLICY_SINGULAR,
                name,
                "pdb disruptions allowed is negative",
            ));
        }
        let disrupted = pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object)
            .map_or(0, serde_json::Map::len);
        if disrupted > MAX_DISRUPTED_PODS {
            return Err(ApiError::forbidden(
                POLICY_SINGULAR,
                name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            let mut e = ApiError::too_many_requests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                0,
            );
            e.details.causes.push(Cause {
                reason: "DisruptionBudget".into(),
                message: format!(
                    "The disruption budget {name} needs {} healthy pods and has {} currently",
                    status_int(&pdb, "desiredHealthy"),
                    status_int(&pdb, "currentHealthy")
                ),
                field: String::new(),
            });
            return Err(e);
        }
        if dry_run {
            return Ok(());
        }
        let now = object::now_rfc3339();
        let status = &mut pdb["status"];
        status["disruptionsAllowed"] = json!(allowed - 1);
        if allowed == 1 {
            disruption::update_disruption_allowed(status, &now);
        }
        if !status.get("disruptedPods").is_some_and(Value::is_object) {
            status["disruptedPods"] = json!({});
        }
        status["disruptedPods"][pod] = json!(now);
        pdb["metadata"]["resourceVersion"] = json!(rev.to_string());
        let mut headers = HeaderMap::new();
        headers.insert(http::header::USER_AGENT, HeaderValue::from_static(MANAGER));
        let mut pctx = Ctx {
            server: ctx.server,
            def: def.clone(),
            ns: ctx.ns.clone(),
            name: Some(name.to_string()),
            query: Query::default(),
            headers,
            accept: Accept::default(),
            warnings: Vec::new(),
            user: ctx.user.clone(),
        };
        let current = ctx
            .server
            .store()
            .get(key)
            .ok_or_else(|| ApiError::not_found(def.gr(), name))?;
        if current.mod_revision == rev {
            match rest::update_object(&mut pctx, name, pdb.clone(), current, None, Sub::Status)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        // Changed meanwhile: judge the latest version.
        let latest = ctx
            .server
            .store()
            .get(key)
            .ok_or_else(|| ApiError::not_found(def.gr(), name))?;
        rev = latest.mod_revision;
        pdb =
            serde_json::from_slice(&latest.value).map_err(|e| ApiError::internal(e.to_string()))?;
    }
    let mut e = ApiError::timeout(format!(
        "Timeout: couldn't update PodDisruptionBudget \"{name}\" due to conflicts"
    ));
    e.details.retry_after = Some(10);
    Err(e)
}
