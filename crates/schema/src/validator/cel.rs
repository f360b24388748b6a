//! `x-kubernetes-validations`: CEL rules compiled with the `cel` crate (cel-rust),
//! checked against the schema the way kube-apiserver's type checker would catch the
//! common mistakes, and evaluated with `self` (and `oldSelf`) bound to the value at
//! the rule's node.
//!
//! cel-rust interprets CEL dynamically; kube-apiserver type-checks rules when the
//! CRD is written. To refuse what kube-apiserver refuses, compilation here adds a
//! small static check on top of parsing: identifiers must be `self`, `oldSelf`, a
//! comprehension variable or a type name; fields selected on schema objects must be
//! declared (with Kubernetes' property-name escaping, `x-y` is `x__dash__y`);
//! functions must exist; comparisons of a string with a number and rules that
//! obviously don't give a `bool` are refused. Calls of Kubernetes CEL library
//! functions this crate doesn't implement (`quantity`, `ip`, `url`, ...) are
//! accepted and the rule is not enforced.
//!
//! Evaluation is bounded: expressions nesting too deep (which would overflow a
//! thread's stack in the parser or the interpreter) are refused when compiled,
//! compilation runs on a thread with a large stack, evaluation is guarded against
//! panics, and a rule whose estimated cost on the value at hand (loops nested over
//! the value's size) is too high gives kube-apiserver's cost-limit error instead of
//! running.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelOptional,
    CelString,
};
use cel::common::value::Val;
use cel::{Context, Env, Program};
use serde_json::Value;

use super::{Additional, Format, Graph, NodeId, Types};

/// Longest rule accepted, in code points (cel-go's default limit).
const MAX_SOURCE_CODE_POINTS: usize = 100_000;
/// Most operator characters in one expression: long operator chains make deep
/// trees, which the parser and the interpreter walk recursively.
const MAX_OPERATORS: usize = 2_000;
/// Deepest expression tree accepted (evaluation recurses once per level).
const MAX_AST_DEPTH: usize = 128;
/// Stack of the thread that parses rules.
const COMPILE_STACK: usize = 64 << 20;
/// Estimated evaluation cost above which a rule is not run (kube-apiserver's
/// per-call limit is 1,000,000 of its cost units; ours are coarser).
pub(crate) const COST_LIMIT: f64 = 1e8;

/// `reason` values a rule may give.
pub(crate) const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// One entry of `x-kubernetes-validations`, as written.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleSpec {
    pub(crate) rule: String,
    pub(crate) message: String,
    pub(crate) message_expression: String,
    pub(crate) reason: Option<String>,
    pub(crate) field_path: String,
    pub(crate) optional_old_self: Option<bool>,
    /// The entry had a `reason`/`optionalOldSelf` of the wrong JSON type, or was not
    /// an object.
    pub(crate) malformed: bool,
}

impl RuleSpec {
    pub(crate) fn parse(v: &Value) -> RuleSpec {
        let Some(m) = v.as_object() else {
            return RuleSpec {
                malformed: true,
                ..RuleSpec::default()
            };
        };
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        RuleSpec {
            rule: s("rule"),
            message: s("message"),
            message_expression: s("messageExpression"),
            reason: m.get("reason").and_then(Value::as_str).map(str::to_owned),
            field_path: s("fieldPath"),
            optional_old_self: m.get("optionalOldSelf").and_then(Value::as_bool),
            malformed: false,
        }
    }

    /// Go's `%#v` of the internal `apiextensions.ValidationRule`, the bad value
    /// kube-apiserver prints for a rule that doesn't compile.
    pub(crate) fn go_repr(&self) -> String {
        use super::messages::go_quote;
        let reason = match &self.reason {
            None => "(*apiextensions.FieldValueErrorReason)(nil)".to_owned(),
            Some(_) => "(*apiextensions.FieldValueErrorReason)(0xc000000000)".to_owned(),
        };
        let optional = match self.optional_old_self {
            None => "(*bool)(nil)".to_owned(),
            Some(_) => "(*bool)(0xc000000000)".to_owned(),
        };
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
            go_quote(&self.rule),
            go_quote(&self.message),
            go_quote(&self.message_expression),
            go_quote(&self.field_path),
        )
    }

    /// `ruleErrorString`: the message if any, else the rule.
    pub(crate) fn error_string(&self) -> &str {
        let m = self.message.trim();
        if m.is_empty() { self.rule.trim() } else { m }
    }
}

/// A compiled expression and what its evaluation needs.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) program: Program,
    /// The expression refers to `oldSelf` (a transition rule).
    pub(crate) uses_old_self: bool,
    /// `cost[e]`: how many expression nodes run about `size^e` times.
    pub(crate) cost: Vec<u32>,
}

/// How a rule compiled.
#[derive(Debug)]
pub(crate) enum RuleProgram {
    /// The rule is empty (reported by the CRD checks; nothing to run).
    Empty,
    /// The rule calls a Kubernetes CEL library function this crate doesn't
    /// implement: accepted, not enforced.
    Unsupported,
    /// `compilation failed: ...` and the like.
    Error(String),
    Ok(Compiled),
}

/// One compiled rule of a schema node.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) spec: RuleSpec,
    pub(crate) program: RuleProgram,
    /// The compiled `messageExpression`, or why it didn't compile.
    pub(crate) message_program: Option<Result<Compiled, String>>,
    /// The normalized `fieldPath` (`spec.replicas`, `map[key]`), if valid.
    pub(crate) field_path: Option<String>,
}

/// The environment every rule runs in: the standard library, optionals and the
/// strings extension.
pub(crate) fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Registering fresh functions on the standard environment cannot clash; if
        // it ever did, rules using them would just fail to resolve.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = k8s_lists(&mut env);
        Arc::new(env)
    })
}

// ---------------------------------------------------------------------------
// Kubernetes' list library (k8s.io/apiserver/pkg/cel/library/lists.go).

use cel::common::types::{DYN_TYPE, LIST_TYPE};
use cel::common::value::CowVal;

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Ret<'b, 'v> = Result<CowVal<'b, 'v>, cel::ExecutionError>;

fn k8s_lists(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], list_min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], list_max)?;
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

fn items<'a, 'v>(list: &'a CowVal<'_, 'v>) -> Result<Vec<&'a (dyn Val + 'v)>, cel::ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| cel::ExecutionError::function_error("list", "not a list"))?;
    let mut it = iterable.iter();
    let mut out = Vec::new();
    while let Some(x) = it.next() {
        out.push(x);
    }
    Ok(out)
}

fn compare(a: &dyn Val, b: &dyn Val) -> Result<std::cmp::Ordering, cel::ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| cel::ExecutionError::function_error("compare", "no such overload"))?
        .compare(b)
}

fn receiver<'b, 'v>(
    args: Args<'b, 'v>,
) -> Result<(CowVal<'b, 'v>, Args<'b, 'v>), cel::ExecutionError> {
    let mut args = args.into_iter();
    let list = args
        .next()
        .ok_or_else(cel::ExecutionError::missing_argument_or_target)?;
    Ok((list, args.collect()))
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (list, _) = receiver(args)?;
    let xs = items(&list)?;
    for w in xs.windows(2) {
        if compare(w[0], w[1])? == std::cmp::Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (list, _) = receiver(args)?;
    let xs = items(&list)?;
    let mut int: i64 = 0;
    let mut double: f64 = 0.0;
    let mut is_double = false;
    for x in xs {
        if let Some(i) = x.downcast_ref::<CelInt>() {
            int = int
                .checked_add(*i.inner())
                .ok_or_else(|| cel::ExecutionError::function_error("sum", "integer overflow"))?;
        } else if let Some(d) = x.downcast_ref::<CelDouble>() {
            is_double = true;
            double += *d.inner();
        } else {
            return Err(cel::ExecutionError::function_error(
                "sum",
                "no such overload",
            ));
        }
    }
    Ok(if is_double {
        #[allow(clippy::cast_precision_loss)]
        CowVal::owned(CelDouble::from(double + int as f64))
    } else {
        CowVal::owned(CelInt::from(int))
    })
}

fn extreme<'b, 'v>(args: Args<'b, 'v>, want: std::cmp::Ordering, name: &str) -> Ret<'b, 'v> {
    let (list, _) = receiver(args)?;
    let xs = items(&list)?;
    let mut best: Option<&(dyn Val + 'v)> = None;
    for x in xs {
        best = match best {
            Some(b) if compare(x, b)? != want => Some(b),
            _ => Some(x),
        };
    }
    match best {
        Some(b) => Ok(CowVal::Owned(b.clone_as_boxed())),
        None => Err(cel::ExecutionError::function_error(
            name,
            format!("{name} called on empty list"),
        )),
    }
}

fn list_min<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, std::cmp::Ordering::Less, "min")
}

fn list_max<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, std::cmp::Ordering::Greater, "max")
}

fn position<'b, 'v>(args: Args<'b, 'v>, last: bool) -> Ret<'b, 'v> {
    let (list, rest) = receiver(args)?;
    let needle = rest
        .first()
        .ok_or_else(cel::ExecutionError::missing_argument_or_target)?;
    let xs = items(&list)?;
    let found = if last {
        xs.iter().rposition(|x| x.equals(needle.as_ref()))
    } else {
        xs.iter().position(|x| x.equals(needle.as_ref()))
    };
    let i = found.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX));
    Ok(CowVal::owned(CelInt::from(i)))
}

fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    position(args, true)
}

// ---------------------------------------------------------------------------
// Property-name escaping (k8s.io/apiserver/pkg/cel/escaping.go).

const RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL name of a schema property, or `None` if it can't be written in CEL.
pub(crate) fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Compilation.

/// What the static check knows about an expression's value.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    /// The value at a schema node (`resource` for a resource root: implicit
    /// `apiVersion`, `kind` and `metadata`).
    Node(NodeId, bool),
    /// `metadata` of a resource: only `name` and `generateName` are visible.
    Meta,
    Bool,
    Int,
    UInt,
    Double,
    String,
    Bytes,
    Null,
    List,
    Map,
    Type,
    Optional,
    Dyn,
}

/// Functions of cel-rust's standard library and the strings extension, as
/// member (`x.f()`) or global (`f(x)`) calls.
const FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "dyn",
    "type",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "reverse",
    "format",
    "hasValue",
    "value",
    "orValue",
    "or",
    "of",
    "none",
    "ofNonZeroValue",
    "quote",
    "all",
    "exists",
    "exists_one",
    "isSorted",
    "sum",
    "min",
    "max",
];

/// Kubernetes CEL library functions (and standard ones needing timestamps) that
/// cel-rust doesn't provide here: a rule calling one is accepted and not enforced.
const UNSUPPORTED_FUNCTIONS: &[&str] = &[
    "find",
    "findAll",
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "quantity",
    "isQuantity",
    "sign",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    "asInteger",
    "isInteger",
    "asApproximateFloat",
    "add",
    "sub",
    "ip",
    "isIP",
    "isCanonical",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "cidr",
    "isCIDR",
    "containsIP",
    "containsCIDR",
    "masked",
    "prefixLength",
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    "validate",
    "named",
    "equivalent",
    "intersects",
    "transformList",
    "transformMap",
    "transformMapEntry",
    "timestamp",
    "duration",
    "getFullYear",
    "getMonth",
    "getDayOfMonth",
    "getDayOfYear",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

/// Namespaces written as call targets (`optional.none()`, `sets.contains(...)`).
const NAMESPACES: [&str; 6] = ["optional", "sets", "strings", "format", "math", "lists"];

const TYPE_NAMES: [&str; 11] = [
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// A static-check failure: message and the expression it is about.
struct CheckError {
    id: u64,
    message: String,
}

struct Checker<'g> {
    graph: &'g Graph,
    self_ty: Ty,
    old_self_ty: Ty,
    scopes: Vec<(String, Ty)>,
    uses_old_self: bool,
    unsupported: Option<String>,
    /// Expression nodes by the exponent of their cost.
    cost: Vec<u32>,
}

fn kind_of(graph: &Graph, ty: &Ty) -> Ty {
    match ty {
        Ty::Node(id, _) => {
            let n = &graph.nodes[*id];
            if n.int_or_string
                || n.types.is_empty()
                || n.preserve_unknown && n.types == Types::OBJECT && n.properties.is_empty()
            {
                if n.types == Types::OBJECT && n.preserve_unknown && n.properties.is_empty() {
                    return Ty::Map;
                }
                return Ty::Dyn;
            }
            match n.types {
                Types::OBJECT => Ty::Map,
                Types::ARRAY => Ty::List,
                Types::STRING if n.format == Format::Byte => Ty::Bytes,
                Types::STRING => Ty::String,
                Types::INTEGER => Ty::Int,
                Types::NUMBER => Ty::Double,
                Types::BOOLEAN => Ty::Bool,
                _ => Ty::Dyn,
            }
        }
        Ty::Meta => Ty::Map,
        other => other.clone(),
    }
}

fn is_number(t: &Ty) -> bool {
    matches!(t, Ty::Int | Ty::UInt | Ty::Double)
}

fn type_name_of(t: &Ty) -> &'static str {
    match t {
        Ty::Bool => "bool",
        Ty::Int => "int",
        Ty::UInt => "uint",
        Ty::Double => "double",
        Ty::String => "string",
        Ty::Bytes => "bytes",
        Ty::Null => "null_type",
        Ty::List => "list",
        Ty::Map => "map",
        Ty::Type => "type",
        Ty::Optional => "optional_type",
        _ => "dyn",
    }
}

impl Checker<'_> {
    fn lookup(&self, name: &str) -> Option<Ty> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    }

    fn count(&mut self, exponent: usize) {
        if self.cost.len() <= exponent {
            self.cost.resize(exponent + 1, 0);
        }
        self.cost[exponent] = self.cost[exponent].saturating_add(1);
    }

    /// The type of selecting `field` on a value of type `t`.
    fn select(&self, t: &Ty, field: &str, id: u64) -> Result<Ty, CheckError> {
        let undefined = || CheckError {
            id,
            message: format!("undefined field '{field}'"),
        };
        match t {
            Ty::Node(nid, resource) => {
                let n = &self.graph.nodes[*nid];
                if *resource || n.embedded {
                    match field {
                        "apiVersion" | "kind" => return Ok(Ty::String),
                        "metadata" => return Ok(Ty::Meta),
                        _ => {}
                    }
                }
                if let Additional::Schema(a) = n.additional {
                    return Ok(Ty::Node(a, self.graph.nodes[a].embedded));
                }
                for (name, &child) in &n.properties {
                    if escape(name).as_deref() == Some(field) {
                        return Ok(Ty::Node(child, self.graph.nodes[child].embedded));
                    }
                }
                let free = n.preserve_unknown
                    || n.types.is_empty()
                    || n.additional == Additional::Bool(true)
                    || n.int_or_string;
                if n.types == Types::OBJECT && !free {
                    Err(undefined())
                } else if n.types.is_empty() || free {
                    Ok(Ty::Dyn)
                } else {
                    // Selecting on a scalar or a list.
                    Err(CheckError {
                        id,
                        message: format!(
                            "type '{}' does not support field selection",
                            type_name_of(&kind_of(self.graph, t))
                        ),
                    })
                }
            }
            Ty::Meta => match field {
                "name" | "generateName" => Ok(Ty::String),
                _ => Err(undefined()),
            },
            Ty::Bool | Ty::Int | Ty::UInt | Ty::Double | Ty::String | Ty::Bytes | Ty::List => {
                Err(CheckError {
                    id,
                    message: format!(
                        "type '{}' does not support field selection",
                        type_name_of(t)
                    ),
                })
            }
            _ => Ok(Ty::Dyn),
        }
    }

    fn check(&mut self, e: &IdedExpr, loops: usize) -> Result<Ty, CheckError> {
        self.count(loops);
        match &e.expr {
            Expr::Unspecified => Ok(Ty::Dyn),
            Expr::Literal(l) => Ok(match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::UInt,
            }),
            Expr::Ident(name) => {
                if let Some(t) = self.lookup(name) {
                    return Ok(t);
                }
                match name.as_str() {
                    "self" => Ok(self.self_ty.clone()),
                    "oldSelf" => {
                        self.uses_old_self = true;
                        Ok(self.old_self_ty.clone())
                    }
                    n if TYPE_NAMES.contains(&n) => Ok(Ty::Type),
                    _ => Err(CheckError {
                        id: e.id,
                        message: format!("undeclared reference to '{name}' (in container '')"),
                    }),
                }
            }
            Expr::Select(s) => {
                let t = self.check(&s.operand, loops)?;
                let t = self.select(&t, &s.field, e.id)?;
                Ok(if s.test { Ty::Bool } else { t })
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.check(el, loops)?;
                }
                Ok(Ty::List)
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                        self.check(&me.key, loops)?;
                        self.check(&me.value, loops)?;
                    }
                }
                Ok(Ty::Map)
            }
            Expr::Struct(s) => Err(CheckError {
                id: e.id,
                message: format!(
                    "undeclared reference to '{}' (in container '')",
                    s.type_name
                ),
            }),
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range, loops)?;
                let range_kind = kind_of(self.graph, &range);
                let (first, second) = match (&range, &range_kind) {
                    (Ty::Node(id, _), Ty::List) => {
                        let item = self.graph.nodes[*id]
                            .items
                            .map_or(Ty::Dyn, |i| Ty::Node(i, self.graph.nodes[i].embedded));
                        if c.iter_var2.is_some() {
                            (Ty::Int, item)
                        } else {
                            (item, Ty::Dyn)
                        }
                    }
                    (Ty::Node(id, _), Ty::Map) => {
                        let value = match self.graph.nodes[*id].additional {
                            Additional::Schema(a) => Ty::Node(a, self.graph.nodes[a].embedded),
                            _ => Ty::Dyn,
                        };
                        (Ty::String, value)
                    }
                    (_, Ty::Bool | Ty::Int | Ty::UInt | Ty::Double | Ty::String | Ty::Bytes) => {
                        return Err(CheckError {
                            id: c.iter_range.id,
                            message: format!(
                                "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
                                type_name_of(&range_kind)
                            ),
                        });
                    }
                    _ => (Ty::Dyn, Ty::Dyn),
                };
                let accu = self.check(&c.accu_init, loops)?;
                let depth = self.scopes.len();
                self.scopes.push((c.accu_var.clone(), accu));
                self.scopes.push((c.iter_var.clone(), first));
                if let Some(v2) = &c.iter_var2 {
                    self.scopes.push((v2.clone(), second));
                }
                let r = (|| {
                    self.check(&c.loop_cond, loops + 1)?;
                    self.check(&c.loop_step, loops + 1)?;
                    self.scopes.truncate(depth + 1);
                    self.check(&c.result, loops)
                })();
                self.scopes.truncate(depth);
                r
            }
            Expr::Call(call) => self.call(e.id, call, loops),
        }
    }

    fn call(
        &mut self,
        id: u64,
        call: &cel::common::ast::CallExpr,
        loops: usize,
    ) -> Result<Ty, CheckError> {
        let name = call.func_name.as_str();
        // Namespaced functions: `optional.none()`, `sets.contains(a, b)`.
        let namespaced = matches!(
            call.target.as_deref().map(|t| &t.expr),
            Some(Expr::Ident(ns)) if NAMESPACES.contains(&ns.as_str()) && self.lookup(ns).is_none()
        );
        let target = match (&call.target, namespaced) {
            (Some(t), false) => Some(self.check(t, loops)?),
            _ => None,
        };
        let mut args = Vec::with_capacity(call.args.len());
        for a in &call.args {
            args.push(self.check(a, loops)?);
        }
        let kinds: Vec<Ty> = args.iter().map(|a| kind_of(self.graph, a)).collect();
        let linear = |k: &Ty| !matches!(k, Ty::Bool | Ty::Int | Ty::UInt | Ty::Double | Ty::Null);
        use cel::common::ast::operators as op;
        match name {
            op::LOGICAL_AND | op::LOGICAL_OR | op::LOGICAL_NOT | op::NOT_STRICTLY_FALSE => {
                Ok(Ty::Bool)
            }
            op::EQUALS
            | op::NOT_EQUALS
            | op::LESS
            | op::LESS_EQUALS
            | op::GREATER
            | op::GREATER_EQUALS => {
                if let [a, b] = kinds.as_slice() {
                    let ordering = !matches!(name, op::EQUALS | op::NOT_EQUALS);
                    let clash = (is_number(a) && matches!(b, Ty::String | Ty::Bool | Ty::Bytes))
                        || (is_number(b) && matches!(a, Ty::String | Ty::Bool | Ty::Bytes))
                        || (matches!(a, Ty::String)
                            && matches!(b, Ty::Bool | Ty::Bytes | Ty::List | Ty::Map))
                        || (matches!(b, Ty::String)
                            && matches!(a, Ty::Bool | Ty::Bytes | Ty::List | Ty::Map))
                        || (ordering
                            && (matches!(a, Ty::List | Ty::Map)
                                || matches!(b, Ty::List | Ty::Map)));
                    if clash {
                        return Err(CheckError {
                            id,
                            message: format!(
                                "found no matching overload for '{name}' applied to '({}, {})'",
                                type_name_of(a),
                                type_name_of(b)
                            ),
                        });
                    }
                    if linear(a) || linear(b) {
                        self.count(loops + 1);
                    }
                }
                Ok(Ty::Bool)
            }
            op::IN => {
                self.count(loops + 1);
                Ok(Ty::Bool)
            }
            op::ADD | op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO => {
                if let [a, b] = kinds.as_slice() {
                    if linear(a) || linear(b) {
                        self.count(loops + 1);
                    }
                    let numeric_only = name != op::ADD;
                    let bad = (numeric_only
                        && (matches!(a, Ty::String | Ty::Bool | Ty::List | Ty::Map)
                            || matches!(b, Ty::String | Ty::Bool | Ty::List | Ty::Map)))
                        || (is_number(a)
                            && matches!(b, Ty::String | Ty::Bool | Ty::List | Ty::Map))
                        || (is_number(b)
                            && matches!(a, Ty::String | Ty::Bool | Ty::List | Ty::Map))
                        || (matches!(a, Ty::String) && matches!(b, Ty::List | Ty::Map | Ty::Bool))
                        || (matches!(b, Ty::String) && matches!(a, Ty::List | Ty::Map | Ty::Bool));
                    if bad {
                        return Err(CheckError {
                            id,
                            message: format!(
                                "found no matching overload for '{name}' applied to '({}, {})'",
                                type_name_of(a),
                                type_name_of(b)
                            ),
                        });
                    }
                    return Ok(if a == b && a != &Ty::Dyn {
                        a.clone()
                    } else {
                        Ty::Dyn
                    });
                }
                Ok(Ty::Dyn)
            }
            op::NEGATE => Ok(kinds.first().cloned().unwrap_or(Ty::Dyn)),
            op::CONDITIONAL => Ok(match (args.get(1), args.get(2)) {
                (Some(a), Some(b)) if a == b => a.clone(),
                _ => Ty::Dyn,
            }),
            op::INDEX | op::OPT_INDEX => {
                let opt = name == op::OPT_INDEX;
                let t = match args.first() {
                    Some(Ty::Node(nid, _)) => {
                        let n = &self.graph.nodes[*nid];
                        match (n.items, n.additional) {
                            (Some(i), _) if n.types == Types::ARRAY => {
                                Ty::Node(i, self.graph.nodes[i].embedded)
                            }
                            (_, Additional::Schema(a)) => Ty::Node(a, self.graph.nodes[a].embedded),
                            _ => Ty::Dyn,
                        }
                    }
                    _ => Ty::Dyn,
                };
                Ok(if opt { Ty::Optional } else { t })
            }
            op::OPT_SELECT => Ok(Ty::Optional),
            _ => {
                if UNSUPPORTED_FUNCTIONS.contains(&name) {
                    if self.unsupported.is_none() {
                        self.unsupported = Some(name.to_owned());
                    }
                    return Ok(Ty::Dyn);
                }
                if (name == "all"
                    || name == "exists"
                    || name == "exists_one"
                    || name == "map"
                    || name == "filter")
                    && call.target.is_some()
                {
                    // Left as a call by the parser: two-variable comprehensions
                    // (`all(i, v, ...)`) are not supported by cel-rust.
                    if self.unsupported.is_none() {
                        self.unsupported = Some(name.to_owned());
                    }
                    return Ok(Ty::Dyn);
                }
                if !FUNCTIONS.contains(&name) {
                    return Err(CheckError {
                        id,
                        message: format!("undeclared reference to '{name}' (in container '')"),
                    });
                }
                let receiver = target.as_ref().map(|t| kind_of(self.graph, t));
                if matches!(
                    name,
                    "contains"
                        | "startsWith"
                        | "endsWith"
                        | "matches"
                        | "split"
                        | "replace"
                        | "join"
                        | "indexOf"
                        | "lastIndexOf"
                        | "size"
                        | "format"
                        | "trim"
                        | "lowerAscii"
                        | "upperAscii"
                        | "reverse"
                        | "substring"
                        | "string"
                        | "int"
                        | "double"
                        | "quote"
                        | "isSorted"
                        | "sum"
                        | "min"
                        | "max"
                ) {
                    self.count(loops + 1);
                }
                if let Some(r) = &receiver
                    && matches!(name, "contains" | "startsWith" | "endsWith" | "matches")
                    && matches!(
                        r,
                        Ty::Int | Ty::UInt | Ty::Double | Ty::Bool | Ty::List | Ty::Map
                    )
                {
                    return Err(CheckError {
                        id,
                        message: format!(
                            "found no matching overload for '{name}' applied to '{}.({})'",
                            type_name_of(r),
                            kinds
                                .iter()
                                .map(type_name_of)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
                Ok(match name {
                    "size" | "int" | "indexOf" | "lastIndexOf" => Ty::Int,
                    "uint" => Ty::UInt,
                    "double" => Ty::Double,
                    "contains" | "startsWith" | "endsWith" | "matches" | "bool" | "hasValue" => {
                        Ty::Bool
                    }
                    "string" | "charAt" | "lowerAscii" | "upperAscii" | "replace" | "substring"
                    | "trim" | "join" | "format" | "quote" => Ty::String,
                    "reverse" => receiver.unwrap_or(Ty::Dyn),
                    "bytes" => Ty::Bytes,
                    "split" => Ty::List,
                    "type" => Ty::Type,
                    "of" | "none" | "ofNonZeroValue" | "or" => Ty::Optional,
                    _ => Ty::Dyn,
                })
            }
        }
    }
}

/// Depth of an expression tree, without recursing deeper than `limit + 1`.
fn depth(e: &IdedExpr, limit: usize) -> usize {
    fn go(e: &IdedExpr, d: usize, limit: usize) -> usize {
        if d > limit {
            return d;
        }
        let children: Vec<&IdedExpr> = match &e.expr {
            Expr::Call(c) => c.target.iter().map(|t| &**t).chain(c.args.iter()).collect(),
            Expr::Comprehension(c) => vec![
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ],
            Expr::List(l) => l.elements.iter().collect(),
            Expr::Map(m) => m
                .entries
                .iter()
                .filter_map(|en| match &en.expr {
                    cel::common::ast::EntryExpr::MapEntry(me) => Some([&me.key, &me.value]),
                    cel::common::ast::EntryExpr::StructField(_) => None,
                })
                .flatten()
                .collect(),
            Expr::Struct(s) => s
                .entries
                .iter()
                .filter_map(|en| match &en.expr {
                    cel::common::ast::EntryExpr::StructField(f) => Some(&f.value),
                    cel::common::ast::EntryExpr::MapEntry(_) => None,
                })
                .collect(),
            Expr::Select(s) => vec![&*s.operand],
            _ => Vec::new(),
        };
        children
            .into_iter()
            .map(|c| go(c, d + 1, limit))
            .max()
            .unwrap_or(d)
    }
    go(e, 1, limit)
}

/// Cheap checks on the source before the parser sees it: size, and operator
/// count (a bound on how deep the parse and the tree can get).
fn precheck(src: &str) -> Result<(), String> {
    let points = src.chars().count();
    if points > MAX_SOURCE_CODE_POINTS {
        return Err(format!(
            "expression code point size exceeds limit: size: {points}, limit {MAX_SOURCE_CODE_POINTS}"
        ));
    }
    let ops = src
        .chars()
        .filter(|c| {
            matches!(
                c,
                '+' | '-'
                    | '*'
                    | '/'
                    | '%'
                    | '<'
                    | '>'
                    | '='
                    | '!'
                    | '.'
                    | '['
                    | '('
                    | '{'
                    | '?'
                    | '&'
                    | '|'
            )
        })
        .count();
    if ops > MAX_OPERATORS {
        return Err(format!(
            "ERROR: <input>:1:1: expression too complex: more than {MAX_OPERATORS} operators"
        ));
    }
    Ok(())
}

/// Go-like rendering of an error at an expression: `ERROR: <input>:L:C: msg` and
/// the source line with a caret.
fn located(program: &Program, src: &str, id: u64, message: &str) -> String {
    let offset = program
        .source_info()
        .offset_for(id)
        .map_or(0, |(start, _)| start as usize);
    let mut line_no = 1;
    let mut col = 0;
    let mut line_start = 0;
    for (i, c) in src.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line_no += 1;
            col = 0;
            line_start = i + 1;
        } else {
            col += 1;
        }
    }
    let line = src[line_start..].lines().next().unwrap_or("");
    format!(
        "ERROR: <input>:{line_no}:{}: {message}\n | {line}\n | {}^",
        col + 1,
        ".".repeat(col)
    )
}

/// What to compile: an expression, the schema node it applies to, and how.
pub(crate) struct Source<'a> {
    pub(crate) text: &'a str,
    pub(crate) node: NodeId,
    /// The node is a resource root (the CRD root or an embedded resource).
    pub(crate) resource: bool,
    pub(crate) optional_old_self: bool,
    /// A message expression: must give a string rather than a bool.
    pub(crate) message: bool,
}

pub(crate) enum Outcome {
    Ok(Compiled),
    Unsupported,
    Error(String),
}

/// Compiles one expression (on the current thread: see [`compile_all`]).
fn compile_one(graph: &Graph, s: &Source<'_>) -> Outcome {
    let failed = |detail: String| {
        Outcome::Error(if s.message {
            format!("messageExpression compilation failed: {detail}")
        } else {
            format!("compilation failed: {detail}")
        })
    };
    if let Err(e) = precheck(s.text) {
        return failed(e);
    }
    let program = match env().compile(s.text) {
        Ok(p) => p,
        Err(e) => return failed(e.to_string().replace("\n| ", "\n | ")),
    };
    if depth(program.expression(), MAX_AST_DEPTH) > MAX_AST_DEPTH {
        return failed(format!(
            "ERROR: <input>:1:1: expression recursion limit exceeded: {MAX_AST_DEPTH}"
        ));
    }
    let self_ty = Ty::Node(s.node, s.resource);
    let mut checker = Checker {
        graph,
        old_self_ty: if s.optional_old_self {
            Ty::Optional
        } else {
            self_ty.clone()
        },
        self_ty,
        scopes: Vec::new(),
        uses_old_self: false,
        unsupported: None,
        cost: Vec::new(),
    };
    let ty = match checker.check(program.expression(), 0) {
        Ok(t) => t,
        Err(e) => return failed(located(&program, s.text, e.id, &e.message)),
    };
    if checker.unsupported.is_some() {
        return Outcome::Unsupported;
    }
    let kind = kind_of(graph, &ty);
    if s.message {
        if !matches!(kind, Ty::String | Ty::Dyn) {
            return Outcome::Error("must evaluate to a string".to_owned());
        }
    } else if !matches!(kind, Ty::Bool | Ty::Dyn) {
        return Outcome::Error("cel expression must evaluate to a bool".to_owned());
    }
    Outcome::Ok(Compiled {
        program,
        uses_old_self: checker.uses_old_self,
        cost: checker.cost,
    })
}

/// Compiles expressions on a thread with a large stack (the parser recurses), a
/// panic counting as a compilation error.
pub(crate) fn compile_all(graph: &Graph, sources: &[Source<'_>]) -> Vec<Outcome> {
    if sources.is_empty() {
        return Vec::new();
    }
    let run = || {
        sources
            .iter()
            .map(|s| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile_one(graph, s)))
                    .unwrap_or_else(|_| {
                        Outcome::Error("internal error: the CEL compiler failed".into())
                    })
            })
            .collect::<Vec<_>>()
    };
    let spawned = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn_scoped(scope, run)
            .ok()
            .map(|h| h.join())
    });
    match spawned {
        Some(Ok(out)) => out,
        // No thread could be started: compile here (the precheck bounds the depth).
        None => run(),
        Some(Err(_)) => sources
            .iter()
            .map(|_| Outcome::Error("internal error: the CEL compiler failed".into()))
            .collect(),
    }
}

// ---------------------------------------------------------------------------
// Values.

/// Number of JSON nodes in a value (the size used for cost estimates: what
/// comprehensions can iterate over; string operations are linear and fast).
pub(crate) fn size(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(size).sum::<usize>(),
        Value::Object(map) => 1 + map.values().map(size).sum::<usize>(),
        _ => 1,
    }
}

/// Estimated cost of running an expression over a value of `size` nodes.
pub(crate) fn estimate(cost: &[u32], size: usize) -> f64 {
    let s = size as f64 + 1.0;
    cost.iter()
        .enumerate()
        .map(|(e, &n)| f64::from(n) * s.powi(i32::try_from(e).unwrap_or(i32::MAX)))
        .sum()
}

/// The CEL value of `v` at schema node `id` (`resource`: a resource root).
pub(crate) fn to_val<'a>(
    graph: &Graph,
    id: Option<NodeId>,
    v: &'a Value,
    resource: bool,
) -> Box<dyn Val + 'a> {
    let node = id.map(|i| &graph.nodes[i]);
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => {
            let double = node.is_some_and(|n| n.types == Types::NUMBER);
            match n.as_i64() {
                Some(i) if !double => Box::new(CelInt::from(i)),
                _ => Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0))),
            }
        }
        Value::String(s) => {
            if node.is_some_and(|n| n.format == Format::Byte && n.types == Types::STRING) {
                use base64::Engine as _;
                if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s) {
                    return Box::new(CelBytes::from(bytes));
                }
            }
            Box::new(CelString::from(s.as_str()))
        }
        Value::Array(items) => {
            let item = node.and_then(|n| n.items);
            let list: Vec<Box<dyn Val + 'a>> = items
                .iter()
                .map(|x| {
                    to_val(
                        graph,
                        item,
                        x,
                        item.is_some_and(|i| graph.nodes[i].embedded),
                    )
                })
                .collect();
            Box::new(CelList::from(list))
        }
        Value::Object(map) => {
            let mut out: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
                HashMap::with_capacity(map.len());
            let resource = resource || node.is_some_and(|n| n.embedded);
            for (k, x) in map {
                if resource && k == "metadata" {
                    // Only `name` and `generateName` are visible, as in kube-apiserver.
                    let mut meta: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> = HashMap::new();
                    if let Value::Object(m) = x {
                        for key in ["name", "generateName"] {
                            if let Some(Value::String(s)) = m.get(key) {
                                meta.insert(
                                    CelMapKey::from(key),
                                    Box::new(CelString::from(s.as_str())),
                                );
                            }
                        }
                    }
                    out.insert(CelMapKey::from(k.as_str()), Box::new(CelMap::from(meta)));
                    continue;
                }
                let (child, key) = match node {
                    Some(n) => match (n.properties.get(k), n.additional) {
                        (Some(&c), _) => (Some(c), escape(k)),
                        (None, Additional::Schema(a)) => (Some(a), Some(k.clone())),
                        (None, _) => (None, Some(k.clone())),
                    },
                    None => (None, Some(k.clone())),
                };
                let Some(key) = key else { continue };
                let embedded = child.is_some_and(|c| graph.nodes[c].embedded);
                out.insert(CelMapKey::from(key), to_val(graph, child, x, embedded));
            }
            Box::new(CelMap::from(out))
        }
    }
}

/// `optional.of(v)` / `optional.none()`.
pub(crate) fn optional<'a>(v: Option<Box<dyn Val + 'a>>) -> Box<dyn Val + 'a> {
    Box::new(match v {
        Some(v) => CelOptional::of(v),
        None => CelOptional::none(),
    })
}

/// The result of running a program.
pub(crate) enum Eval {
    Value(cel::Value),
    Error(String),
    /// Not a runtime error cel-go could give: a panic in the interpreter.
    Panic,
}

/// Runs `program` with `self` and `oldSelf` bound.
pub(crate) fn run<'a>(
    program: &Program,
    self_val: Box<dyn Val + 'a>,
    old_self: Option<Box<dyn Val + 'a>>,
) -> Eval {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut ctx = Context::with_env(Arc::clone(env()));
        ctx.add_variable_as_val("self", self_val);
        if let Some(old) = old_self {
            ctx.add_variable_as_val("oldSelf", old);
        }
        program.execute(&ctx)
    }));
    match outcome {
        Ok(Ok(v)) => Eval::Value(v),
        Ok(Err(e)) => Eval::Error(go_error(&e)),
        Err(_) => Eval::Panic,
    }
}

/// cel-go's wording for the common runtime errors.
fn go_error(e: &cel::ExecutionError) -> String {
    use cel::ExecutionError as E;
    match e {
        E::NoSuchKey(k) => format!("no such key: {k}"),
        E::DivisionByZero(_) => "division by zero".into(),
        E::RemainderByZero(_) => "modulus by zero".into(),
        E::Overflow(..) => "integer overflow".into(),
        E::IndexOutOfBounds(i) => format!("index out of bounds: {}", cel_value_text(i)),
        E::NoSuchOverload(_)
        | E::UnsupportedBinaryOperator(..)
        | E::ValuesNotComparable(..)
        | E::UnexpectedType { .. } => "no such overload".into(),
        other => other.to_string(),
    }
}

fn cel_value_text(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        cel::Value::Float(f) => f.to_string(),
        cel::Value::String(s) => (**s).clone(),
        other => format!("{other:?}"),
    }
}

/// Validates a `fieldPath` (`.a.b`, `.a['x.y']`, `['k']`) against the schema
/// below `id`; returns the path as a field path (`a.b`, `a[k]`, `a.x.y`).
pub(crate) fn field_path(graph: &Graph, id: NodeId, path: &str) -> Option<String> {
    let mut node = id;
    let mut out = String::new();
    let bytes = path.as_bytes();
    let mut i = 0;
    let step = |node: &mut NodeId, out: &mut String, name: &str, bracket: bool| -> bool {
        let n = &graph.nodes[*node];
        if !n.properties.is_empty() {
            let Some(&c) = n.properties.get(name) else {
                return false;
            };
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            *node = c;
            true
        } else if let Additional::Schema(a) = n.additional {
            let _ = bracket;
            out.push('[');
            out.push_str(name);
            out.push(']');
            *node = a;
            true
        } else {
            false
        }
    };
    if path.is_empty() {
        return None;
    }
    while i < bytes.len() {
        match bytes[i] {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'.' && bytes[j] != b'[' {
                    j += 1;
                }
                let name = &path[start..j];
                if name.is_empty() || !step(&mut node, &mut out, name, false) {
                    return None;
                }
                i = j;
            }
            b'[' => {
                if bytes.get(i + 1) != Some(&b'\'') {
                    return None;
                }
                let mut j = i + 2;
                let mut name = String::new();
                loop {
                    match bytes.get(j) {
                        None => return None,
                        Some(b'\\') => {
                            let c = *bytes.get(j + 1)?;
                            name.push(match c {
                                b'\'' => '\'',
                                b'\\' => '\\',
                                b'n' => '\n',
                                b't' => '\t',
                                _ => return None,
                            });
                            j += 2;
                        }
                        Some(b'\'') => break,
                        Some(_) => {
                            let c = path[j..].chars().next()?;
                            name.push(c);
                            j += c.len_utf8();
                        }
                    }
                }
                if bytes.get(j + 1) != Some(&b']') || !step(&mut node, &mut out, &name, true) {
                    return None;
                }
                i = j + 2;
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(escape("replicas").as_deref(), Some("replicas"));
        assert_eq!(escape("x-y").as_deref(), Some("x__dash__y"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1a"), None);
        assert_eq!(escape("a b"), None);
    }

    #[test]
    fn precheck_limits() {
        assert!(precheck("self.a + 1 > 2").is_ok());
        assert!(precheck(&"1 + ".repeat(5000)).is_err());
        assert!(precheck(&"a".repeat(MAX_SOURCE_CODE_POINTS + 1)).is_err());
    }
}
