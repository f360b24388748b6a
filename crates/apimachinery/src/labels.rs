//! Kubernetes label selectors: the full grammar of
//! `k8s.io/apimachinery/pkg/labels.Parse`, `metav1.LabelSelector` objects,
//! matching, and the canonical string form.
//!
//! ```text
//! <selector>    ::= <requirement> | <requirement> "," <selector>
//! <requirement> ::= ["!"] KEY [ <set-based> | <exact> | <numeric> ]
//! <set-based>   ::= ("in" | "notin") "(" VALUE {"," VALUE} ")"
//! <exact>       ::= ("=" | "==" | "!=") VALUE
//! <numeric>     ::= (">" | "<") INTEGER
//! ```
//!
//! Whitespace (space, tab, CR, LF) may surround tokens. Keys are qualified
//! names (an optional DNS-1123 subdomain prefix and `/`, then at most 63
//! characters of `[-A-Za-z0-9_.]` starting and ending alphanumeric); values
//! are empty or follow the same name rule. Requirements are kept sorted by key,
//! and set values sorted and deduplicated, as Go does.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::Value;

use crate::error::SelectorError;
use crate::gofmt;
use crate::names::{is_label_value, is_qualified_name};

/// A set of labels that a selector can be matched against.
pub trait Labels {
    /// The value of label `key`, if the label is set.
    fn get(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(String::as_str)
    }
}

/// A JSON object of labels; only string values count as set labels.
impl Labels for serde_json::Map<String, Value> {
    fn get(&self, key: &str) -> Option<&str> {
        serde_json::Map::get(self, key).and_then(Value::as_str)
    }
}

/// A `metadata.labels` value as found in an object (e.g. from
/// `obj.pointer("/metadata/labels")`): `None` or a non-object means no labels.
impl Labels for Option<&Value> {
    fn get(&self, key: &str) -> Option<&str> {
        self.and_then(|v| v.get(key)).and_then(Value::as_str)
    }
}

/// The operator of a label [`Requirement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key`: the label is set.
    Exists,
    /// `!key`: the label is not set.
    DoesNotExist,
    /// `key=value`.
    Equals,
    /// `key==value`.
    DoubleEquals,
    /// `key!=value` (also true when the label is not set).
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)` (also true when the label is not set).
    NotIn,
    /// `key>N` (the label is an integer greater than N).
    GreaterThan,
    /// `key<N` (the label is an integer less than N).
    LessThan,
}

impl Operator {
    /// The operator's name in `k8s.io/apimachinery/pkg/selection`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One clause of a label selector: a key, an operator and its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds and validates a requirement like Go's `labels.NewRequirement`:
    /// the key must be a qualified name, values must be valid label values,
    /// `in`/`notin` need at least one value, `=`/`==`/`!=` exactly one,
    /// `exists`/`!` none, and `gt`/`lt` exactly one integer.
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        let key = key.into();
        let mut errs = Vec::new();
        let key_errs = is_qualified_name(&key);
        if !key_errs.is_empty() {
            errs.push(format!(
                "key: Invalid value: {}: {}",
                gofmt::quote(&key),
                key_errs.join("; ")
            ));
        }
        let invalid_values = |detail: &str| {
            format!(
                "values: Invalid value: {}: {detail}",
                gofmt::string_slice(&values)
            )
        };
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(invalid_values(
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(invalid_values(
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(invalid_values(
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid_values(
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            gofmt::quote(v)
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = is_label_value(v);
            if !value_errs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    gofmt::quote(v),
                    value_errs.join("; ")
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key,
                operator,
                values,
            })
        } else {
            Err(SelectorError::Label(gofmt::aggregate(&errs)))
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values (empty for `exists` and `!`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// Whether `labels` satisfy this requirement (Go's `Requirement.Matches`).
    pub fn matches(&self, labels: &impl Labels) -> bool {
        let got = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                got.is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => got.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = got.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Go's `Requirement.String()`: `!k`, `k`, `k=v`, `k==v`, `k!=v`,
    /// `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`, values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements.
///
/// The default value (and [`Selector::everything`]) matches every object.
/// [`Selector::from_label_selector`] of `null` gives a selector that matches
/// nothing, like Go's `labels.Nothing()`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// Parses the string form of a label selector (Go's `labels.Parse`).
    /// The empty string (or only whitespace) selects everything.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let mut requirements = Parser::new(s).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// A selector that matches every set of labels.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// A selector that matches no set of labels (Go's `labels.Nothing()`).
    pub fn nothing() -> Selector {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Whether this selector places no restriction (Go's `Empty()`).
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is the selector that matches nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// Converts a `metav1.LabelSelector` JSON object
    /// (`{matchLabels: {k: v}, matchExpressions: [{key, operator, values}]}`,
    /// operators `In`, `NotIn`, `Exists`, `DoesNotExist`) like Go's
    /// `metav1.LabelSelectorAsSelector`: `null` selects nothing, an object
    /// without `matchLabels` and `matchExpressions` (or with both empty)
    /// selects everything.
    pub fn from_label_selector(v: &Value) -> Result<Selector, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(Selector::nothing()),
            Value::Object(obj) => obj,
            other => {
                return Err(SelectorError::Label(format!(
                    "a label selector must be an object, got {other}"
                )));
            }
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let Some(v) = v.as_str() else {
                        return Err(SelectorError::Label(format!(
                            "matchLabels[{k}]: label values must be strings, got {v}"
                        )));
                    };
                    requirements.push(Requirement::new(
                        k.clone(),
                        Operator::Equals,
                        vec![v.to_string()],
                    )?);
                }
            }
            Some(other) => {
                return Err(SelectorError::Label(format!(
                    "matchLabels must be an object, got {other}"
                )));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for e in exprs {
                    requirements.push(expression_requirement(e)?);
                }
            }
            Some(other) => {
                return Err(SelectorError::Label(format!(
                    "matchExpressions must be a list, got {other}"
                )));
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// A selector requiring each label of a plain `{key: value}` map, like
    /// Go's `labels.SelectorFromSet` (a ReplicationController's
    /// `spec.selector`): an empty or absent map selects everything.
    pub fn from_set(v: &Value) -> Result<Selector, SelectorError> {
        match v {
            Value::Null => Ok(Selector::everything()),
            Value::Object(_) => {
                Selector::from_label_selector(&serde_json::json!({"matchLabels": v}))
            }
            other => Err(SelectorError::Label(format!(
                "a label set must be an object, got {other}"
            ))),
        }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &impl Labels) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The single value label `key` must have, if the selector requires one
    /// (`key=v`, `key==v` or `key in (v)`); Go's `RequiresExactMatch`.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

fn expression_requirement(e: &Value) -> Result<Requirement, SelectorError> {
    let key = e.get("key").and_then(Value::as_str).unwrap_or("");
    let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
    let operator = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError::Label(format!(
                "{} is not a valid label selector operator",
                gofmt::quote(other)
            )));
        }
    };
    let values = match e.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    SelectorError::Label(format!(
                        "matchExpressions values must be strings, got {v}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(SelectorError::Label(format!(
                "matchExpressions values must be a list, got {other}"
            )));
        }
    };
    Requirement::new(key, operator, values)
}

impl fmt::Display for Selector {
    /// Go's `Selector.String()`: requirements joined by `,` (`""` for
    /// everything and for nothing).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

// ---------------------------------------------------------------------------
// Lexer and parser, following the structure of Go's labels/selector.go so the
// accepted language and the error texts are the same.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn lex(&mut self) -> (Token, String) {
        let b = self.s.as_bytes();
        while self.pos < b.len() && is_whitespace(b[self.pos]) {
            self.pos += 1;
        }
        // Go's lexer reads a NUL byte as end of input.
        if self.pos >= b.len() || b[self.pos] == 0 {
            return (Token::EndOfString, String::new());
        }
        if is_special(b[self.pos]) {
            self.special()
        } else {
            self.identifier_or_keyword()
        }
    }

    fn identifier_or_keyword(&mut self) -> (Token, String) {
        let b = self.s.as_bytes();
        let start = self.pos;
        while self.pos < b.len()
            && b[self.pos] != 0
            && !is_special(b[self.pos])
            && !is_whitespace(b[self.pos])
        {
            self.pos += 1;
        }
        let lit = self.s.get(start..self.pos).unwrap_or_default().to_string();
        match keyword(&lit) {
            Some(t) => (t, lit),
            None => (Token::Identifier, lit),
        }
    }

    fn special(&mut self) -> (Token, String) {
        let b = self.s.as_bytes();
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        while self.pos < b.len() && is_special(b[self.pos]) {
            let end = self.pos + 1;
            let buf = self.s.get(start..end).unwrap_or_default();
            if let Some(t) = keyword(buf) {
                last = Some((t, end));
                self.pos = end;
            } else if last.is_some() {
                break;
            } else {
                self.pos = end;
            }
        }
        match last {
            Some((t, end)) => {
                self.pos = end;
                (t, self.s.get(start..end).unwrap_or_default().to_string())
            }
            None => (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    self.s.get(start..self.pos).unwrap_or_default()
                ),
            ),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

fn err(msg: String) -> SelectorError {
    SelectorError::Label(msg)
}

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer { s, pos: 0 };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, i: usize, ctx: Context) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(i)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.item(self.position, ctx);
        if self.position < self.items.len() {
            self.position += 1;
        }
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .requirement()
                        .map_err(|e| err(format!("unable to parse requirement: {}", e)))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(err(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op) = op {
            return Requirement::new(key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        Requirement::new(key, op, values)
    }

    /// Parses `[!]KEY`; the operator is returned when it is already known
    /// (`!KEY`, or `KEY` followed by `,` or the end).
    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Operator>), SelectorError> {
        let mut operator = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(err(format!("found '{lit}', expected: identifier")));
        }
        let key_errs = is_qualified_name(&lit);
        if !key_errs.is_empty() {
            return Err(err(format!(
                "<nil>: Invalid value: {}: {}",
                gofmt::quote(&lit),
                key_errs.join("; ")
            )));
        }
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((lit, operator))
    }

    fn operator(&mut self) -> Result<Operator, SelectorError> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        })
    }

    /// Parses `(a,b,...)`; returns the values sorted and deduplicated.
    fn set_values(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(err(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        let mut set = match tok {
            Token::Identifier | Token::Comma => {
                let set = self.identifiers()?;
                let (t, _) = self.consume(Context::Values);
                if t != Token::ClosedPar {
                    return Err(err(format!("found '{lit}', expected: ')'")));
                }
                set
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                vec![String::new()]
            }
            _ => {
                return Err(err(format!(
                    "found '{lit}', expected: ',', ')' or identifier"
                )));
            }
        };
        set.sort();
        set.dedup();
        Ok(set)
    }

    fn identifiers(&mut self) -> Result<Vec<String>, SelectorError> {
        let mut set: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.push(lit);
                    let (t2, l2) = self.lookahead(Context::Values);
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(err(format!("found '{l2}', expected: ',' or ')'"))),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.push(String::new());
                    }
                    let (t2, _) = self.lookahead(Context::Values);
                    if t2 == Token::ClosedPar {
                        set.push(String::new());
                        return Ok(set);
                    }
                    if t2 == Token::Comma {
                        set.push(String::new());
                    }
                }
                _ => return Err(err(format!("found '{lit}', expected: ',', or identifier"))),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(err(format!("found '{lit}', expected: identifier")))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parse_and_canonical_string() {
        let cases = [
            ("", ""),
            ("   ", ""),
            ("x", "x"),
            ("!x", "!x"),
            (" ! x ", "!x"),
            ("x=a", "x=a"),
            ("x = a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("x=", "x="),
            ("x=,y=z", "x=,y=z"),
            ("x in (a,b)", "x in (a,b)"),
            ("x in (b,a,a)", "x in (a,b)"),
            ("x notin (a)", "x notin (a)"),
            ("x in ()", "x in ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,)", "x in (,a)"),
            ("x in (a,,b)", "x in (,a,b)"),
            ("x>1", "x>1"),
            ("x < -1", ""),
            ("z,y=b,x in (a)", "x in (a),y=b,z"),
            ("x=in", "x=in"),
            ("in", "in"),
            ("x in (in,notin)", "x in (in,notin)"),
            ("example.com/key=Value_1.2-3", "example.com/key=Value_1.2-3"),
            ("a\tin\n(b)\r", "a in (b)"),
        ];
        for (input, want) in cases {
            if input == "x < -1" {
                // Go rejects negative numbers: "-1" is not a valid label value.
                assert!(Selector::parse(input).is_err());
                continue;
            }
            let s = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(s.to_string(), want, "{input:?}");
            // The canonical form parses back to the same selector.
            assert_eq!(Selector::parse(&s.to_string()).unwrap(), s, "{input:?}");
        }
    }

    #[test]
    fn parse_errors_match_go() {
        let cases = [
            ("x=a=b", "found '=', expected: ',' or 'end of string'"),
            ("x=a,", "found '', expected: identifier after ','"),
            (
                ",x",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            ("x,,y", "found ',', expected: identifier after ','"),
            (
                "x y",
                "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            (
                "x in (a",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "x in (a b)",
                "unable to parse requirement: found 'b', expected: ',' or ')'",
            ),
            (
                "x in (=)",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            ),
            (
                "x in (,=)",
                "unable to parse requirement: found '=', expected: ',', or identifier",
            ),
            (
                "x=(a)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "!=a",
                "found '!=', expected: !, identifier, or 'end of string'",
            ),
            (
                "! =a",
                "unable to parse requirement: found '=', expected: identifier",
            ),
            ("!x=a", "found '=', expected: ',' or 'end of string'"),
            (
                "x>a",
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
            ("x in (a)b", "found 'b', expected: ',' or 'end of string'"),
        ];
        for (input, want) in cases {
            let e = Selector::parse(input).unwrap_err();
            assert_eq!(e.to_string(), want, "{input:?}");
            assert!(matches!(e, SelectorError::Label(_)));
        }
    }

    #[test]
    fn validation_errors_match_go() {
        let e = Selector::parse("a$b=c").unwrap_err().to_string();
        assert_eq!(
            e,
            "unable to parse requirement: <nil>: Invalid value: \"a$b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        let e = Selector::parse("app=a$b").unwrap_err().to_string();
        assert_eq!(
            e,
            "unable to parse requirement: values[0][app]: Invalid value: \"a$b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        let long = "a".repeat(64);
        let e = Selector::parse(&format!("k={long}"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "unable to parse requirement: values[0][k]: Invalid value: \"{long}\": must be no more than 63 characters"
            )
        );
        let e = Selector::parse(&format!("k=-{long}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("must be no more than 63 characters; a valid label"),
            "{e}"
        );
        let e = Selector::parse("x in (a$,b$)").unwrap_err().to_string();
        assert!(
            e.starts_with("unable to parse requirement: [values[0][x]: Invalid value: \"a$\""),
            "{e}"
        );
        assert!(e.ends_with("?')]"), "{e}");
        assert!(Selector::parse(&format!("{}/k", "a".repeat(254))).is_err());
        assert!(Selector::parse("Prefix.com/k").is_err());
        assert!(Selector::parse("a/b/c").is_err());
    }

    #[test]
    fn matching_table() {
        let l = labels(&[
            ("app", "web"),
            ("tier", "frontend"),
            ("n", "5"),
            ("empty", ""),
        ]);
        let cases = [
            ("", true),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (a)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (a)", true),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("n<5", false),
            ("app>1", false),
            ("missing>1", false),
            ("empty=", true),
            ("empty", true),
            ("empty in ()", true),
            ("app=web,tier=frontend", true),
            ("app=web,tier=backend", false),
        ];
        for (sel, want) in cases {
            let s = Selector::parse(sel).unwrap();
            assert_eq!(s.matches(&l), want, "{sel:?}");
        }
    }

    #[test]
    fn labels_impls() {
        let s = Selector::parse("app=web").unwrap();
        let obj = json!({"metadata": {"labels": {"app": "web", "n": 1}}});
        assert!(s.matches(&obj.pointer("/metadata/labels")));
        assert!(!s.matches(&obj.pointer("/metadata/missing")));
        assert!(!s.matches(&obj.pointer("/metadata/labels/app")));
        let map = obj["metadata"]["labels"].as_object().unwrap();
        assert!(s.matches(map));
        // Non-string values are not labels.
        assert!(Selector::parse("!n").unwrap().matches(map));
        let hm: HashMap<String, String> = [("app".to_string(), "web".to_string())].into();
        assert!(s.matches(&hm));
        assert!(Selector::everything().matches(&None::<&Value>));
    }

    #[test]
    fn requirements_sorted_and_exact_match() {
        let s = Selector::parse("z=1,a in (x),m").unwrap();
        let keys: Vec<&str> = s.requirements().iter().map(Requirement::key).collect();
        assert_eq!(keys, ["a", "m", "z"]);
        assert_eq!(s.requirements()[0].operator(), Operator::In);
        assert_eq!(s.requirements()[0].values(), ["x"]);
        assert_eq!(s.requires_exact_match("a"), Some("x"));
        assert_eq!(s.requires_exact_match("z"), Some("1"));
        assert_eq!(s.requires_exact_match("m"), None);
        assert_eq!(s.requires_exact_match("q"), None);
        assert!(!s.is_everything());
        assert!(Selector::parse("").unwrap().is_everything());
        assert!(Selector::everything().is_everything());
        assert_eq!("a=b".parse::<Selector>().unwrap().to_string(), "a=b");
    }

    #[test]
    fn from_label_selector_cases() {
        let nothing = Selector::from_label_selector(&Value::Null).unwrap();
        assert!(nothing.is_nothing());
        assert!(!nothing.is_everything());
        assert!(!nothing.matches(&labels(&[])));
        assert_eq!(nothing.to_string(), "");

        for empty in [
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchLabels": null, "matchExpressions": []}),
        ] {
            let s = Selector::from_label_selector(&empty).unwrap();
            assert!(s.is_everything(), "{empty}");
            assert!(s.matches(&labels(&[("a", "b")])));
        }

        let s = Selector::from_label_selector(&json!({
            "matchLabels": {"app": "web", "b": "x"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["frontend", "backend"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "app", "operator": "Exists", "values": []}
            ]
        }))
        .unwrap();
        assert_eq!(
            s.to_string(),
            "app=web,app,b=x,!canary,env notin (prod),tier in (backend,frontend)"
        );
        assert!(s.matches(&labels(&[("app", "web"), ("b", "x"), ("tier", "backend")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("b", "x"),
            ("tier", "backend"),
            ("canary", "1")
        ])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("b", "x"),
            ("tier", "backend"),
            ("env", "prod")
        ])));
    }

    #[test]
    fn from_label_selector_errors() {
        let e = Selector::from_label_selector(
            &json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"Equals\" is not a valid label selector operator"
        );
        let e = Selector::from_label_selector(
            &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
        );
        let e = Selector::from_label_selector(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist"
        );
        let e = Selector::from_label_selector(&json!({"matchLabels": {"a b": "c"}})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("key: Invalid value: \"a b\": name part must consist"),
            "{e}"
        );
        let e = Selector::from_label_selector(&json!({"matchLabels": {"a": "c d", "b": "e f"}}))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("values[0][a]: Invalid value: \"c d\""),
            "{e}"
        );
        assert!(Selector::from_label_selector(&json!("app=web")).is_err());
        assert!(Selector::from_label_selector(&json!({"matchLabels": {"a": 1}})).is_err());
        assert!(Selector::from_label_selector(&json!({"matchLabels": []})).is_err());
    }

    #[test]
    fn requirement_new_validation() {
        assert!(Requirement::new("a", Operator::Equals, vec![]).is_err());
        assert!(
            Requirement::new("a", Operator::GreaterThan, vec!["1".into(), "2".into()]).is_err()
        );
        let r = Requirement::new("a", Operator::GreaterThan, vec!["10".into()]).unwrap();
        assert_eq!(r.to_string(), "a>10");
        assert!(r.matches(&labels(&[("a", "11")])));
        let e = Requirement::new("a b", Operator::In, vec![])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("[key: Invalid value: \"a b\""), "{e}");
        assert!(e.ends_with("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty]"), "{e}");
        assert_eq!(Operator::GreaterThan.as_str(), "gt");
    }

    #[test]
    fn lexer_operators() {
        // "===" lexes as "==" then "=", so the value is missing.
        assert_eq!(
            Selector::parse("a===b").unwrap_err().to_string(),
            "unable to parse requirement: found '=', expected: identifier"
        );
        assert_eq!(
            Selector::parse("a!=b").unwrap().requirements()[0].operator(),
            Operator::NotEquals
        );
        assert_eq!(
            Selector::parse("a==b").unwrap().requirements()[0].operator(),
            Operator::DoubleEquals
        );
        assert_eq!(
            Selector::parse("a=b").unwrap().requirements()[0].operator(),
            Operator::Equals
        );
        assert_eq!(
            Selector::parse("a<3").unwrap().requirements()[0].operator(),
            Operator::LessThan
        );
        assert_eq!(
            Selector::parse("a notin (b)").unwrap().requirements()[0].operator(),
            Operator::NotIn
        );
        // Non-ASCII identifiers are lexed whole and then rejected by validation.
        assert!(Selector::parse("é=b").is_err());
        assert!(Selector::parse("a=é").is_err());
    }
}
