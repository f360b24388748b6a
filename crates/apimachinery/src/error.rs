//! The error shared by the label and field selector parsers.

/// A label or field selector that cannot be parsed or is invalid.
///
/// The `Display` text is the message the Kubernetes API server puts in its
/// 400 `BadRequest` status for the same input, e.g.
/// `unable to parse requirement: found '=', expected: identifier` or
/// `invalid selector: 'a'; can't understand 'a'`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector (string form or `metav1.LabelSelector`) is invalid.
    #[error("{0}")]
    Label(String),
    /// A field selector is invalid.
    #[error("{0}")]
    Field(String),
}
