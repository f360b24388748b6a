//! Who is asking: the user an authenticator produced (kube's `user.Info`),
//! the well-known user and group names, and ServiceAccount usernames.

use std::collections::BTreeMap;

/// The group every authenticated user is in.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of requests without credentials.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of requests without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group that may do anything (kube's privileged-group authorizer).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group of every ServiceAccount.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

const SA_PREFIX: &str = "system:serviceaccount:";

/// An authenticated (or anonymous) user: name, UID, groups and extra
/// attributes, as an authenticator or impersonation produced them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The username (`alice`, `system:serviceaccount:ns:name`).
    pub name: String,
    /// A unique ID, when the authenticator has one.
    pub uid: String,
    /// The groups the user is in.
    pub groups: Vec<String>,
    /// Further attributes (`authentication.kubernetes.io/pod-name`, …).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user named `name` in `groups`.
    pub fn new<G, S>(name: &str, groups: G) -> UserInfo
    where
        G: IntoIterator<Item = S>,
        S: Into<String>,
    {
        UserInfo {
            name: name.to_string(),
            groups: groups.into_iter().map(Into::into).collect(),
            ..UserInfo::default()
        }
    }

    /// ServiceAccount `name` in `namespace` as its token authenticates it:
    /// `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts`,
    /// `system:serviceaccounts:<ns>` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str) -> UserInfo {
        let [all, ns] = service_account_groups(namespace);
        UserInfo::new(
            &service_account_username(namespace, name),
            [all, ns, ALL_AUTHENTICATED.to_string()],
        )
    }

    /// The anonymous user: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> UserInfo {
        UserInfo::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The ServiceAccount `(namespace, name)` this username names, if any.
    pub fn as_service_account(&self) -> Option<(&str, &str)> {
        split_service_account(&self.name)
    }
}

/// The username of ServiceAccount `name` in `namespace`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SA_PREFIX}{namespace}:{name}")
}

/// The groups a ServiceAccount's user is in (besides `system:authenticated`).
pub fn service_account_groups(namespace: &str) -> [String; 2] {
    [
        ALL_SERVICE_ACCOUNTS.to_string(),
        format!("{ALL_SERVICE_ACCOUNTS}:{namespace}"),
    ]
}

/// Whether `username` is ServiceAccount `name` in `namespace` (kube's
/// `MatchesUsername`, without building the username).
pub fn matches_service_account(namespace: &str, name: &str, username: &str) -> bool {
    username
        .strip_prefix(SA_PREFIX)
        .and_then(|u| u.strip_prefix(namespace))
        .and_then(|u| u.strip_prefix(':'))
        == Some(name)
}

/// Split `system:serviceaccount:<ns>:<name>` into `(ns, name)`; `None` for
/// any other username or an empty part, as kube's `SplitUsername`.
pub fn split_service_account(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SA_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_usernames_split_as_kube_does() {
        assert_eq!(
            split_service_account("system:serviceaccount:ns:bot"),
            Some(("ns", "bot"))
        );
        assert_eq!(split_service_account("system:serviceaccount:ns:"), None);
        assert_eq!(split_service_account("system:serviceaccount::bot"), None);
        assert_eq!(split_service_account("system:serviceaccount:a:b:c"), None);
        assert_eq!(split_service_account("alice"), None);
        assert_eq!(
            service_account_username("ns", "bot"),
            "system:serviceaccount:ns:bot"
        );
    }
}
