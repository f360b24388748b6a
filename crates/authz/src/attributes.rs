//! What is asked: kube's `authorizer.Attributes` — the user, the verb, and
//! either a resource (namespace, group, version, resource, subresource,
//! name) or a non-resource path — and the Forbidden text kube-apiserver
//! answers when nobody allows it.

use kubeforge_apimachinery::gofmt::quote;

use crate::UserInfo;

/// One request as the authorizers see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, `impersonate`, … (resource requests) or the
    /// lowercased HTTP method (non-resource requests).
    pub verb: String,
    /// Whether this is a resource request (else a non-resource path).
    pub resource_request: bool,
    /// Namespace ("" for cluster-scoped resources and all-namespace lists).
    pub namespace: String,
    /// API group ("" = core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource ("" = none).
    pub subresource: String,
    /// Object name ("" = none; a list with `metadata.name=X` carries X).
    pub name: String,
    /// Request path (non-resource requests).
    pub path: String,
    /// The client's address, when known: the connection's peer, or the
    /// first `X-Forwarded-For` hop when the peer is a trusted proxy. Only
    /// the kubeforge policies' `sourceCIDRs` conditions read it.
    pub source: Option<std::net::IpAddr>,
    /// The request's `fieldSelector` requirements of the form `field=value`
    /// (the Node authorizer allows a node to list its own pods by
    /// `spec.nodeName`).
    pub field_equals: Vec<(String, String)>,
}

impl Attributes {
    /// A resource request.
    #[allow(clippy::too_many_arguments)]
    pub fn resource(
        user: UserInfo,
        verb: &str,
        namespace: &str,
        api_group: &str,
        api_version: &str,
        resource: &str,
        subresource: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user,
            verb: verb.to_string(),
            resource_request: true,
            namespace: namespace.to_string(),
            api_group: api_group.to_string(),
            api_version: api_version.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            name: name.to_string(),
            path: String::new(),
            source: None,
            field_equals: Vec::new(),
        }
    }

    /// A non-resource request: `verb` is the lowercased HTTP method.
    pub fn non_resource(user: UserInfo, verb: &str, path: &str) -> Attributes {
        Attributes {
            user,
            verb: verb.to_string(),
            resource_request: false,
            path: path.to_string(),
            ..Attributes::default()
        }
    }

    /// `resource/subresource`, or `resource` alone.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// kube's `GroupResource.String()` of the request: `pods`,
    /// `deployments.apps`, "" for non-resource requests.
    pub fn qualified_resource(&self) -> String {
        if self.api_group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.api_group)
        }
    }

    /// What was refused, as kube-apiserver's `forbiddenMessage`
    /// (`User "x" cannot list resource "pods" in API group "" in the
    /// namespace "default"`), with `&`, `<`, `>` HTML-escaped as kube does.
    pub fn refusal(&self) -> String {
        let user = quote(&self.user.name);
        let text = if !self.resource_request {
            format!(
                "User {user} cannot {} path {}",
                self.verb,
                quote(&self.path)
            )
        } else if self.namespace.is_empty() {
            format!(
                "User {user} cannot {} resource {} in API group {} at the cluster scope",
                self.verb,
                quote(&self.combined_resource()),
                quote(&self.api_group)
            )
        } else {
            format!(
                "User {user} cannot {} resource {} in API group {} in the namespace {}",
                self.verb,
                quote(&self.combined_resource()),
                quote(&self.api_group),
                quote(&self.namespace)
            )
        };
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    }

    /// The whole message of the 403 `Status` (kube's `NewForbidden` over
    /// [`Self::refusal`]), with the authorizers' `reason` appended after
    /// `: ` when there is one.
    pub fn forbidden_message(&self, reason: &str) -> String {
        let mut err = self.refusal();
        if !reason.is_empty() {
            err.push_str(": ");
            err.push_str(reason);
        }
        let qualified = self.qualified_resource();
        if qualified.is_empty() {
            format!("forbidden: {err}")
        } else if self.name.is_empty() {
            format!("{qualified} is forbidden: {err}")
        } else {
            format!("{qualified} {} is forbidden: {err}", quote(&self.name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> UserInfo {
        UserInfo::new("x", ["system:authenticated"])
    }

    #[test]
    fn forbidden_texts_are_kubes() {
        let a = Attributes::resource(user(), "list", "default", "", "v1", "pods", "", "");
        assert_eq!(
            a.forbidden_message(""),
            r#"pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "default""#
        );
        let a = Attributes::resource(user(), "create", "d", "", "v1", "pods", "exec", "p");
        assert_eq!(
            a.forbidden_message(""),
            r#"pods "p" is forbidden: User "x" cannot create resource "pods/exec" in API group "" in the namespace "d""#
        );
        let a = Attributes::resource(user(), "list", "", "", "v1", "nodes", "", "");
        assert_eq!(
            a.forbidden_message(""),
            r#"nodes is forbidden: User "x" cannot list resource "nodes" in API group "" at the cluster scope"#
        );
        let a = Attributes::resource(user(), "list", "d", "apps", "v1", "deployments", "", "");
        assert_eq!(
            a.forbidden_message(""),
            r#"deployments.apps is forbidden: User "x" cannot list resource "deployments" in API group "apps" in the namespace "d""#
        );
        let a = Attributes::non_resource(user(), "get", "/metrics");
        assert_eq!(
            a.forbidden_message(""),
            r#"forbidden: User "x" cannot get path "/metrics""#
        );
        assert_eq!(
            a.forbidden_message("RBAC: clusterrole.rbac.authorization.k8s.io \"r\" not found"),
            r#"forbidden: User "x" cannot get path "/metrics": RBAC: clusterrole.rbac.authorization.k8s.io "r" not found"#
        );
    }

    #[test]
    fn markup_in_the_refusal_is_escaped() {
        let a = Attributes::non_resource(UserInfo::new("<b>&", Vec::<String>::new()), "get", "/x");
        assert_eq!(
            a.forbidden_message(""),
            r#"forbidden: User "&lt;b&gt;&amp;" cannot get path "/x""#
        );
    }
}
