//! An authorizer's answer and how several are chained: kube's
//! `authorizer.Decision`, its union (the first Allow or Deny wins; when all
//! have no opinion their reasons are joined with newlines) and the
//! privileged-group authorizer kube-apiserver puts first
//! (`system:masters` may do anything).

use crate::Attributes;

/// What an authorizer says about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; `reason` says by what.
    Allow {
        /// Why (`RBAC: allowed by …`), may be empty.
        reason: String,
    },
    /// Refused outright: later authorizers are not asked.
    Deny {
        /// Why, appended to the Forbidden message.
        reason: String,
    },
    /// Neither: the next authorizer decides; if none allows, 403.
    NoOpinion {
        /// Why, appended to the Forbidden message when non-empty.
        reason: String,
    },
}

impl Decision {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }

    /// The reason, whichever the decision.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason }
            | Decision::Deny { reason }
            | Decision::NoOpinion { reason } => reason,
        }
    }
}

/// Something that decides requests.
pub trait Authorizer: Send + Sync {
    /// Decide `attributes`.
    fn authorize(&self, attributes: &Attributes) -> Decision;
}

/// Allows every member of the given groups (kube's
/// `authorizerfactory.NewPrivilegedGroups`, used for `system:masters`).
#[derive(Clone, Debug)]
pub struct PrivilegedGroups(pub Vec<String>);

impl Authorizer for PrivilegedGroups {
    fn authorize(&self, a: &Attributes) -> Decision {
        if self.0.iter().any(|g| a.user.in_group(g)) {
            Decision::Allow {
                reason: String::new(),
            }
        } else {
            Decision::NoOpinion {
                reason: String::new(),
            }
        }
    }
}

/// Authorizers asked in order (kube's `union.New`).
#[derive(Default)]
pub struct Union(pub Vec<Box<dyn Authorizer>>);

impl Authorizer for Union {
    fn authorize(&self, a: &Attributes) -> Decision {
        let mut reasons: Vec<String> = Vec::new();
        for z in &self.0 {
            match z.authorize(a) {
                Decision::NoOpinion { reason } => {
                    if !reason.is_empty() {
                        reasons.push(reason);
                    }
                }
                decided => return decided,
            }
        }
        Decision::NoOpinion {
            reason: reasons.join("\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UserInfo;

    struct Fixed(Decision);
    impl Authorizer for Fixed {
        fn authorize(&self, _: &Attributes) -> Decision {
            self.0.clone()
        }
    }

    fn no(reason: &str) -> Box<dyn Authorizer> {
        Box::new(Fixed(Decision::NoOpinion {
            reason: reason.into(),
        }))
    }

    #[test]
    fn the_first_allow_or_deny_wins_and_reasons_join() {
        let a = Attributes::non_resource(UserInfo::new("u", ["g"]), "get", "/x");
        let u = Union(vec![no("one"), no(""), no("two")]);
        assert_eq!(
            u.authorize(&a),
            Decision::NoOpinion {
                reason: "one\ntwo".into()
            }
        );
        let deny = Box::new(Fixed(Decision::Deny {
            reason: "no".into(),
        }));
        let allow = Box::new(Fixed(Decision::Allow {
            reason: "yes".into(),
        }));
        let u = Union(vec![no("one"), deny, allow]);
        assert_eq!(u.authorize(&a).reason(), "no");
        let masters = Union(vec![Box::new(PrivilegedGroups(vec!["g".into()])), no("x")]);
        assert!(masters.authorize(&a).allowed());
    }
}
