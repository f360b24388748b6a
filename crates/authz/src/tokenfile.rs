//! Static bearer tokens from a file (kube-apiserver's `--token-auth-file`):
//! CSV lines `token,user,uid[,"group1,group2"]`. As kube's `tokenfile`
//! authenticator: fewer than three columns is an error naming the line, an
//! empty token is skipped, a repeated token keeps the last line; users get
//! `system:authenticated` besides their listed groups.

use std::collections::HashMap;

use crate::UserInfo;
use crate::user::ALL_AUTHENTICATED;

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// A line with fewer than three columns.
    #[error(
        "token file must have at least 3 columns (token, user name, user uid), found {found} on line {line}"
    )]
    TooFewColumns {
        /// 1-based line number.
        line: u64,
        /// Columns found.
        found: usize,
    },
    /// Not CSV.
    #[error("token file is not valid CSV: {0}")]
    Csv(#[from] csv::Error),
}

/// Tokens and the users they authenticate.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    tokens: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Parse the file's text.
    pub fn parse(text: &str) -> Result<TokenFile, TokenFileError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::Headers)
            .from_reader(text.as_bytes());
        let mut tokens = HashMap::new();
        for record in reader.records() {
            let record = record?;
            let line = record.position().map_or(0, |p| p.line());
            if record.len() < 3 {
                return Err(TokenFileError::TooFewColumns {
                    line,
                    found: record.len(),
                });
            }
            let token = record.get(0).unwrap_or_default().trim_start();
            if token.is_empty() {
                continue;
            }
            let mut user = UserInfo {
                name: record.get(1).unwrap_or_default().trim_start().to_string(),
                uid: record.get(2).unwrap_or_default().trim_start().to_string(),
                ..UserInfo::default()
            };
            if let Some(groups) = record.get(3).map(str::trim_start).filter(|g| !g.is_empty()) {
                user.groups = groups.split(',').map(str::to_string).collect();
            }
            if !user.in_group(ALL_AUTHENTICATED) {
                user.groups.push(ALL_AUTHENTICATED.to_string());
            }
            tokens.insert(token.to_string(), user);
        }
        Ok(TokenFile { tokens })
    }

    /// Add one token (tests and `kubeforge up` make their own).
    pub fn insert(&mut self, token: &str, mut user: UserInfo) {
        if !user.in_group(ALL_AUTHENTICATED) {
            user.groups.push(ALL_AUTHENTICATED.to_string());
        }
        self.tokens.insert(token.to_string(), user);
    }

    /// The user `token` authenticates.
    pub fn authenticate(&self, token: &str) -> Option<&UserInfo> {
        self.tokens.get(token)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_users_as_kube_reads_them() {
        let f = TokenFile::parse(
            "abc,alice,1\n\
             def,bob,2,\"dev,ops\"\n\
             ,nobody,3\n\
             abc,alice2,4\n",
        )
        .expect("parses");
        assert_eq!(f.len(), 2);
        let a = f.authenticate("abc").expect("abc");
        assert_eq!(a.name, "alice2", "a repeated token keeps the last line");
        assert_eq!(a.groups, vec!["system:authenticated".to_string()]);
        let b = f.authenticate("def").expect("def");
        assert_eq!((b.name.as_str(), b.uid.as_str()), ("bob", "2"));
        assert_eq!(b.groups, vec!["dev", "ops", "system:authenticated"]);
        assert!(f.authenticate("").is_none());
        assert!(f.authenticate("ghi").is_none());
    }

    #[test]
    fn short_lines_are_refused_with_their_number() {
        let e = TokenFile::parse("abc,alice,1\nxyz,bob\n").expect_err("refused");
        assert_eq!(
            e.to_string(),
            "token file must have at least 3 columns (token, user name, user uid), found 2 on line 2"
        );
    }
}
