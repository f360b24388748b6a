//! `/openapi/v3`: the root index and the per-group-version OpenAPI 3.0 documents,
//! with paths shaped like kube-apiserver's (what `kubectl explain`, kubectl's
//! `fieldValidation` support check and its apply patcher look at).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Flavor, KUBERNETES_VERSION, ResourceDefs, convert_all, gather, hash_hex};
use crate::builtin::{API_RESOURCE_LIST, DELETE_OPTIONS, PATCH, STATUS, WATCH_EVENT, builtins};
use crate::{ResourceInfo, SchemaSource};

const COMPONENTS: &str = "#/components/schemas/";
const SCALE_GROUP: &str = "autoscaling";
const SCALE_VERSION: &str = "v1";
const SCALE_KIND: &str = "Scale";

/// The discovery path of a group-version: `api/v1` or `apis/<group>/<version>`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3` root: `{"paths": {"api/v1": {"serverRelativeURL":
/// "/openapi/v3/api/v1?hash=<hex>"}, ...}}`, one entry per served group-version.
/// The hash is a stable hash of that group-version's JSON document, so it changes
/// exactly when the document does.
pub fn openapi_v3_root(resources: &[ResourceInfo]) -> Value {
    let mut gvs: BTreeMap<(&str, &str), ()> = BTreeMap::new();
    for r in resources {
        gvs.insert((r.group.as_str(), r.version.as_str()), ());
    }
    let mut paths = Map::new();
    for (group, version) in gvs.into_keys() {
        let doc = openapi_v3_group_version(group, version, resources);
        let bytes = serde_json::to_vec(&doc).unwrap_or_default();
        let path = gv_path(group, version);
        paths.insert(
            path.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash_hex(&bytes)) }),
        );
    }
    json!({ "paths": paths })
}

/// Go's `ToValidOperationID`: letters, `_` and (not first) digits; other characters
/// capitalize the next letter.
fn operation_id_part(s: &str, capitalize_first: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut capitalize = capitalize_first;
    for (i, c) in s.chars().enumerate() {
        if c.is_alphabetic() || c == '_' || (i != 0 && c.is_ascii_digit()) {
            if capitalize {
                out.extend(c.to_uppercase());
                capitalize = false;
            } else {
                out.push(c);
            }
        } else {
            capitalize = true;
        }
    }
    out
}

/// English article kube puts before a kind in descriptions.
fn article(kind: &str) -> &'static str {
    if kind.ends_with('s') && !kind.ends_with("ss") {
        " "
    } else if kind
        .chars()
        .next()
        .is_some_and(|c| matches!(c.to_ascii_lowercase(), 'a' | 'e' | 'i' | 'o' | 'u'))
    {
        " an "
    } else {
        " a "
    }
}

fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({
        "description": description,
        "in": "query",
        "name": name,
        "schema": { "type": ty, "uniqueItems": true },
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "description": description,
        "in": "path",
        "name": name,
        "required": true,
        "schema": { "type": "string", "uniqueItems": true },
    })
}

fn dry_run() -> Value {
    query(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    )
}

fn field_manager() -> Value {
    query(
        "fieldManager",
        "string",
        "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).",
    )
}

fn field_validation() -> Value {
    query(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    )
}

fn force() -> Value {
    query(
        "force",
        "boolean",
        "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
    )
}

fn list_params() -> Vec<Value> {
    vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
        ),
        query(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize.",
        ),
        query(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
        ),
        query(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        query(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        query(
            "sendInitialEvents",
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
        ),
        query(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
        ),
        query(
            "watch",
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
        ),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            "integer",
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
        ),
    ]
}

/// Per-group-version context for building operations.
struct Ops<'a> {
    gv_id: String,
    tag: String,
    builtin: bool,
    resource: &'a ResourceInfo,
    names: &'a ResourceDefs,
}

/// What one operation does.
#[derive(Clone, Copy)]
enum Verb {
    List,
    ListAllNamespaces,
    Create,
    DeleteCollection,
    Read,
    Replace,
    Patch,
    Delete,
}

impl Ops<'_> {
    fn content(&self, schema_ref: &str, watch: bool) -> Value {
        let mut types = vec!["application/json", "application/yaml"];
        if self.builtin {
            types.push("application/vnd.kubernetes.protobuf");
        }
        if watch {
            types.push("application/json;stream=watch");
            if self.builtin {
                types.push("application/vnd.kubernetes.protobuf;stream=watch");
            }
        }
        let mut content = Map::new();
        for t in types {
            content.insert(t.into(), json!({ "schema": { "$ref": schema_ref } }));
        }
        Value::Object(content)
    }

    fn response(&self, description: &str, schema_ref: &str, watch: bool) -> Value {
        json!({ "description": description, "content": self.content(schema_ref, watch) })
    }

    /// One operation object. `sub` is a subresource (`status`, `scale`) or "".
    fn operation(&self, verb: Verb, namespaced: bool, sub: &str) -> Value {
        let r = self.resource;
        let kind = r.kind.as_str();
        let scale = sub == "scale";
        let kind_ref = if scale {
            builtins()
                .kind(SCALE_GROUP, SCALE_VERSION, SCALE_KIND)
                .map(|k| format!("{COMPONENTS}{}", k.def))
                .unwrap_or_default()
        } else {
            format!("{COMPONENTS}{}", self.names.kind)
        };
        let list_ref = format!("{COMPONENTS}{}", self.names.list);
        let status_ref = format!("{COMPONENTS}{STATUS}");
        let ns = if namespaced { "Namespaced" } else { "" };
        let sub_id = operation_id_part(sub, true);
        let sub_of = if sub.is_empty() {
            String::new()
        } else {
            format!(" {sub} of")
        };
        let gv = &self.gv_id;

        let (action, id, description, params, body, responses) = match verb {
            Verb::List | Verb::ListAllNamespaces => {
                let (id, ns_params) = match verb {
                    Verb::ListAllNamespaces => {
                        (format!("list{gv}{kind}ForAllNamespaces"), list_params())
                    }
                    _ => (format!("list{gv}{ns}{kind}"), list_params()),
                };
                (
                    "list",
                    id,
                    format!("list or watch objects of kind {kind}"),
                    ns_params,
                    None,
                    json!({ "200": self.response("OK", &list_ref, true) }),
                )
            }
            Verb::Create => (
                "post",
                format!("create{gv}{ns}{kind}"),
                format!("create{}{kind}", article(kind)),
                vec![dry_run(), field_manager(), field_validation()],
                Some(
                    json!({ "content": { "*/*": { "schema": { "$ref": kind_ref } } }, "required": true }),
                ),
                json!({
                    "200": self.response("OK", &kind_ref, false),
                    "201": self.response("Created", &kind_ref, false),
                    "202": self.response("Accepted", &kind_ref, false),
                }),
            ),
            Verb::DeleteCollection => {
                let mut params = delete_params();
                params.extend(list_params());
                (
                    "deletecollection",
                    format!("delete{gv}Collection{ns}{kind}"),
                    format!("delete collection of {kind}"),
                    params,
                    Some(
                        json!({ "content": { "*/*": { "schema": { "$ref": format!("{COMPONENTS}{DELETE_OPTIONS}") } } } }),
                    ),
                    json!({ "200": self.response("OK", &status_ref, false) }),
                )
            }
            Verb::Read => (
                "get",
                format!("read{gv}{ns}{kind}{sub_id}"),
                format!("read{sub_of} the specified {kind}"),
                Vec::new(),
                None,
                json!({ "200": self.response("OK", &kind_ref, false) }),
            ),
            Verb::Replace => (
                "put",
                format!("replace{gv}{ns}{kind}{sub_id}"),
                format!("replace{sub_of} the specified {kind}"),
                vec![dry_run(), field_manager(), field_validation()],
                Some(
                    json!({ "content": { "*/*": { "schema": { "$ref": kind_ref } } }, "required": true }),
                ),
                json!({
                    "200": self.response("OK", &kind_ref, false),
                    "201": self.response("Created", &kind_ref, false),
                }),
            ),
            Verb::Patch => {
                let patch_ref = json!({ "schema": { "$ref": format!("{COMPONENTS}{PATCH}") } });
                (
                    "patch",
                    format!("patch{gv}{ns}{kind}{sub_id}"),
                    format!("partially update{sub_of} the specified {kind}"),
                    vec![dry_run(), field_manager(), field_validation(), force()],
                    Some(json!({
                        "content": {
                            "application/apply-patch+yaml": patch_ref,
                            "application/json-patch+json": patch_ref,
                            "application/merge-patch+json": patch_ref,
                        },
                        "required": true,
                    })),
                    json!({
                        "200": self.response("OK", &kind_ref, false),
                        "201": self.response("Created", &kind_ref, false),
                    }),
                )
            }
            Verb::Delete => (
                "delete",
                format!("delete{gv}{ns}{kind}"),
                format!("delete{}{kind}", article(kind)),
                delete_params(),
                Some(
                    json!({ "content": { "*/*": { "schema": { "$ref": format!("{COMPONENTS}{DELETE_OPTIONS}") } } } }),
                ),
                json!({
                    "200": self.response("OK", &status_ref, false),
                    "202": self.response("Accepted", &status_ref, false),
                }),
            ),
        };

        let mut responses = responses;
        if let Value::Object(map) = &mut responses {
            map.insert("401".into(), json!({ "description": "Unauthorized" }));
        }
        let gvk = if scale {
            json!({ "group": SCALE_GROUP, "kind": SCALE_KIND, "version": SCALE_VERSION })
        } else {
            json!({ "group": r.group, "kind": r.kind, "version": r.version })
        };
        let mut op = json!({
            "description": description,
            "operationId": id,
            "responses": responses,
            "tags": [self.tag],
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if let Value::Object(map) = &mut op {
            if !params.is_empty() {
                map.insert("parameters".into(), Value::Array(params));
            }
            if let Some(body) = body {
                map.insert("requestBody".into(), body);
            }
        }
        op
    }
}

fn has(r: &ResourceInfo, verb: &str) -> bool {
    r.verbs.iter().any(|v| v == verb)
}

/// Inserts a path item with its shared parameters.
fn add_path(
    paths: &mut Map<String, Value>,
    path: String,
    params: Vec<Value>,
    ops: Vec<(&str, Value)>,
) {
    if ops.is_empty() {
        return;
    }
    let mut item = Map::new();
    for (method, op) in ops {
        item.insert(method.into(), op);
    }
    let mut shared = params;
    shared.push(query("pretty", "string", "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget)."));
    item.insert("parameters".into(), Value::Array(shared));
    paths.insert(path, Value::Object(item));
}

/// OpenAPI 3.0 document for one group-version (`""` group = core): every
/// definition the paths need under `components.schemas` (kinds carry
/// `x-kubernetes-group-version-kind`), and collection/item paths for each resource
/// (plus the all-namespaces list and the `status`/`scale` subresources) whose
/// operations carry `x-kubernetes-group-version-kind` and `x-kubernetes-action`.
/// PATCH, PUT and POST list `fieldValidation`, `fieldManager` and `dryRun`; PATCH also
/// `force`.
///
/// PATCH bodies are offered as apply, JSON and merge patch only (no strategic merge
/// patch): the schemas carry no `x-kubernetes-patch-merge-key`, so kubectl must not
/// compute strategic merge patches from them (it then uses its compiled-in types).
pub fn openapi_v3_group_version(group: &str, version: &str, resources: &[ResourceInfo]) -> Value {
    let selected: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    let scale = selected
        .iter()
        .any(|r| r.subresources.iter().any(|s| s == "scale"));
    let mut extra = vec![
        DELETE_OPTIONS,
        STATUS,
        PATCH,
        API_RESOURCE_LIST,
        WATCH_EVENT,
    ];
    let scale_def = builtins()
        .kind(SCALE_GROUP, SCALE_VERSION, SCALE_KIND)
        .map(|k| k.def.clone())
        .unwrap_or_default();
    if scale {
        extra.push(&scale_def);
    }
    let gathered = gather(selected.iter().copied(), &extra, Flavor::V3);

    let group_id = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    let gv_id = format!(
        "{}{}",
        operation_id_part(group_id, true),
        operation_id_part(version, true)
    );
    let tag = format!(
        "{}_{}",
        operation_id_part(group_id, false),
        operation_id_part(version, false)
    );
    let prefix = format!("/{}", gv_path(group, version));

    let mut paths = Map::new();
    paths.insert(
        format!("{prefix}/"),
        json!({
            "get": {
                "description": "get available resources",
                "operationId": format!("get{gv_id}APIResources"),
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {
                            "application/json": { "schema": { "$ref": format!("{COMPONENTS}{API_RESOURCE_LIST}") } },
                            "application/yaml": { "schema": { "$ref": format!("{COMPONENTS}{API_RESOURCE_LIST}") } },
                            "application/vnd.kubernetes.protobuf": { "schema": { "$ref": format!("{COMPONENTS}{API_RESOURCE_LIST}") } },
                        },
                    },
                    "401": { "description": "Unauthorized" },
                },
                "tags": [tag],
            }
        }),
    );

    for (r, names) in selected.iter().zip(&gathered.names) {
        let ops = Ops {
            gv_id: gv_id.clone(),
            tag: tag.clone(),
            builtin: matches!(r.schema, SchemaSource::Builtin),
            resource: r,
            names,
        };
        let plural = &r.plural;
        let ns = r.namespaced;
        let namespace_param = || {
            path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            )
        };
        let name_param = || path_param("name", &format!("name of the {}", r.kind));
        let (collection, base_params) = if ns {
            if has(r, "list") {
                add_path(
                    &mut paths,
                    format!("{prefix}/{plural}"),
                    Vec::new(),
                    vec![("get", ops.operation(Verb::ListAllNamespaces, false, ""))],
                );
            }
            (
                format!("{prefix}/namespaces/{{namespace}}/{plural}"),
                vec![namespace_param()],
            )
        } else {
            (format!("{prefix}/{plural}"), Vec::new())
        };

        let mut collection_ops = Vec::new();
        if has(r, "list") {
            collection_ops.push(("get", ops.operation(Verb::List, ns, "")));
        }
        if has(r, "create") {
            collection_ops.push(("post", ops.operation(Verb::Create, ns, "")));
        }
        if has(r, "deletecollection") {
            collection_ops.push(("delete", ops.operation(Verb::DeleteCollection, ns, "")));
        }
        add_path(
            &mut paths,
            collection.clone(),
            base_params.clone(),
            collection_ops,
        );

        let item_params = || {
            let mut p = vec![name_param()];
            p.extend(base_params.iter().cloned());
            p
        };
        let mut item_ops = Vec::new();
        if has(r, "get") {
            item_ops.push(("get", ops.operation(Verb::Read, ns, "")));
        }
        if has(r, "update") {
            item_ops.push(("put", ops.operation(Verb::Replace, ns, "")));
        }
        if has(r, "patch") {
            item_ops.push(("patch", ops.operation(Verb::Patch, ns, "")));
        }
        if has(r, "delete") {
            item_ops.push(("delete", ops.operation(Verb::Delete, ns, "")));
        }
        add_path(
            &mut paths,
            format!("{collection}/{{name}}"),
            item_params(),
            item_ops,
        );

        for sub in r
            .subresources
            .iter()
            .filter(|s| *s == "status" || *s == "scale")
        {
            let mut sub_ops = Vec::new();
            if has(r, "get") {
                sub_ops.push(("get", ops.operation(Verb::Read, ns, sub)));
            }
            if has(r, "update") {
                sub_ops.push(("put", ops.operation(Verb::Replace, ns, sub)));
            }
            if has(r, "patch") {
                sub_ops.push(("patch", ops.operation(Verb::Patch, ns, sub)));
            }
            add_path(
                &mut paths,
                format!("{collection}/{{name}}/{sub}"),
                item_params(),
                sub_ops,
            );
        }
    }

    json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": KUBERNETES_VERSION },
        "paths": paths,
        "components": {
            "schemas": convert_all(&gathered, Flavor::V3),
            "securitySchemes": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                },
            },
        },
        "security": [{ "BearerToken": [] }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids() {
        assert_eq!(
            operation_id_part("rbac.authorization", true),
            "RbacAuthorization"
        );
        assert_eq!(
            operation_id_part("rbac.authorization", false),
            "rbacAuthorization"
        );
        assert_eq!(
            operation_id_part("stable.example.com", true),
            "StableExampleCom"
        );
        assert_eq!(operation_id_part("v1beta1", true), "V1beta1");
        assert_eq!(article("Ingress"), " an ");
        assert_eq!(article("Endpoints"), " ");
        assert_eq!(article("Deployment"), " a ");
    }
}
