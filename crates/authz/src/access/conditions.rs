//! When a kubeforge binding applies: the seed's attribute conditions.
//!
//! - `timeWindows`: the request's time, in the window's IANA time zone
//!   (UTC when none), falls on one of `days` (every day when none) between
//!   `start` (inclusive) and `end` (exclusive), `HH:MM` in 24-hour time,
//!   `end` up to `24:00`; an `end` before `start` runs past midnight into
//!   the next day. Any one window is enough.
//! - `sourceCIDRs`: the client's address lies in one of them.
//! - `requestAttributes`: each match holds (`attribute` one of verb,
//!   namespace, apiGroup, resource, subresource, name, path; `In` or
//!   `NotIn` its values).
//!
//! All three kinds must hold. A request whose client address is unknown
//! (a SubjectAccessReview carries none) cannot satisfy a CIDR: the
//! condition is [`Outcome::Unknown`], which skips an Allow binding and
//! applies a Deny one, so no request is allowed because the answer could
//! not be had.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use kubeforge_apimachinery::names::Cause;
use kubeforge_apimachinery::net::{INVALID_CIDR, IpNet};
use serde::Deserialize;

use crate::Attributes;

/// The SubjectAccessReview `spec.extra` key whose first value is taken as
/// the client address to check `sourceCIDRs` against (a review carries no
/// address of its own); `kubeforge authz explain --source` sets it.
pub const SOURCE_ADDRESS_EXTRA: &str = "authz.kubeforge.dev/source-address";

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct RawConditions {
    time_windows: Vec<RawWindow>,
    #[serde(rename = "sourceCIDRs")]
    source_cidrs: Vec<String>,
    request_attributes: Vec<RawMatch>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawWindow {
    days: Vec<String>,
    start: String,
    end: String,
    time_zone: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawMatch {
    attribute: String,
    operator: String,
    values: Vec<String>,
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const ATTRIBUTES: [&str; 7] = [
    "verb",
    "namespace",
    "apiGroup",
    "resource",
    "subresource",
    "name",
    "path",
];

/// One time window, compiled.
#[derive(Clone, Debug)]
struct Window {
    /// Bit `d` set: the window opens on weekday `d` (0 = Monday).
    days: u8,
    /// Minutes after midnight.
    start: u16,
    end: u16,
    zone: TimeZone,
    /// The zone's offset (seconds) between two of its transitions, from
    /// and until (Unix seconds), found when the window was compiled: a
    /// decision in that span skips the zone's transition table.
    span: (i64, i64, i32),
    /// As written, for explanations.
    text: String,
}

/// The span around now in which `zone`'s offset does not change, and
/// that offset (`(0, 0, 0)`, an empty span, when it cannot be told).
fn steady_span(zone: &TimeZone) -> (i64, i64, i32) {
    let now = Timestamp::now();
    let offset = zone.to_offset(now);
    let from = zone
        .preceding(now)
        .next()
        .map_or(i64::MIN, |t| t.timestamp().as_second());
    let until = zone
        .following(now)
        .next()
        .map_or(i64::MAX, |t| t.timestamp().as_second());
    // The offset must hold from the span's first second (a transition at
    // exactly `now` could be counted on either side).
    let start = Timestamp::from_second(from.max(Timestamp::MIN.as_second()));
    match start {
        Ok(t) if zone.to_offset(t) == offset && from < until => (from, until, offset.seconds()),
        _ => (0, 0, 0),
    }
}

#[derive(Clone, Debug)]
struct Match {
    attribute: usize,
    negate: bool,
    values: Vec<String>,
}

/// A binding's conditions, compiled; empty conditions always hold.
#[derive(Clone, Debug, Default)]
pub struct Conditions {
    windows: Vec<Window>,
    cidrs: Vec<IpNet>,
    matches: Vec<Match>,
}

/// Whether conditions hold for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// They hold.
    Holds,
    /// They do not; why.
    Fails(String),
    /// They cannot be decided (no client address); why.
    Unknown(String),
}

fn minutes(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !(h.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    match (h, m) {
        (24, 0) => Some(24 * 60),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

fn day(s: &str) -> Option<u8> {
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let lower = s.to_ascii_lowercase();
    (0..7u8).find(|&i| {
        let i = usize::from(i);
        lower == DAYS[i].to_ascii_lowercase() || lower == FULL[i]
    })
}

/// The zone named `name` ("" and `UTC` are UTC).
pub fn zone(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" | "Etc/UTC" => Ok(TimeZone::UTC),
        name => TimeZone::get(name).map_err(|_| "unknown time zone".to_string()),
    }
}

impl Conditions {
    pub(crate) fn compile(raw: &RawConditions, field: &str, out: &mut Vec<Cause>) -> Conditions {
        let mut c = Conditions::default();
        for (i, w) in raw.time_windows.iter().enumerate() {
            let f = format!("{field}.timeWindows[{i}]");
            let mut days = 0u8;
            for (j, d) in w.days.iter().enumerate() {
                match day(d) {
                    Some(n) => days |= 1 << n,
                    None => out.push(Cause::not_supported(&format!("{f}.days[{j}]"), d, &DAYS)),
                }
            }
            if w.days.is_empty() {
                days = 0x7f;
            }
            let start = minutes(&w.start).filter(|&m| m < 24 * 60);
            let end = minutes(&w.end);
            if w.start.is_empty() {
                out.push(Cause::required(&format!("{f}.start"), ""));
            } else if start.is_none() {
                out.push(Cause::invalid(
                    &format!("{f}.start"),
                    &w.start,
                    "must be HH:MM in 24-hour time (00:00 to 23:59)",
                ));
            }
            if w.end.is_empty() {
                out.push(Cause::required(&format!("{f}.end"), ""));
            } else if end.is_none() {
                out.push(Cause::invalid(
                    &format!("{f}.end"),
                    &w.end,
                    "must be HH:MM in 24-hour time (00:00 to 24:00)",
                ));
            }
            if let (Some(s), Some(e)) = (start, end)
                && s == e
            {
                out.push(Cause::invalid(
                    &format!("{f}.end"),
                    &w.end,
                    "must differ from start",
                ));
            }
            let zone = match zone(&w.time_zone) {
                Ok(z) => Some(z),
                Err(m) => {
                    out.push(Cause::invalid(&format!("{f}.timeZone"), &w.time_zone, &m));
                    None
                }
            };
            if let (Some(start), Some(end), Some(zone)) = (start, end, zone) {
                let tz = if w.time_zone.is_empty() {
                    "UTC"
                } else {
                    &w.time_zone
                };
                let on = if w.days.is_empty() {
                    "every day".to_string()
                } else {
                    w.days.join(",")
                };
                c.windows.push(Window {
                    days,
                    start,
                    end,
                    span: steady_span(&zone),
                    zone,
                    text: format!("{on} {}-{} {tz}", w.start, w.end),
                });
            }
        }
        for (i, s) in raw.source_cidrs.iter().enumerate() {
            match IpNet::parse(s) {
                Ok(n) => c.cidrs.push(n),
                Err(_) => out.push(Cause::invalid(
                    &format!("{field}.sourceCIDRs[{i}]"),
                    s,
                    INVALID_CIDR,
                )),
            }
        }
        for (i, m) in raw.request_attributes.iter().enumerate() {
            let f = format!("{field}.requestAttributes[{i}]");
            let attribute = ATTRIBUTES.iter().position(|a| *a == m.attribute);
            if attribute.is_none() {
                out.push(Cause::not_supported(
                    &format!("{f}.attribute"),
                    &m.attribute,
                    &ATTRIBUTES,
                ));
            }
            let negate = match m.operator.as_str() {
                "In" => Some(false),
                "NotIn" => Some(true),
                other => {
                    out.push(Cause::not_supported(
                        &format!("{f}.operator"),
                        other,
                        &["In", "NotIn"],
                    ));
                    None
                }
            };
            if m.values.is_empty() {
                out.push(Cause::required(
                    &format!("{f}.values"),
                    "at least one value is required",
                ));
            }
            if let (Some(attribute), Some(negate)) = (attribute, negate) {
                c.matches.push(Match {
                    attribute,
                    negate,
                    values: m.values.clone(),
                });
            }
        }
        c
    }

    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.cidrs.is_empty() && self.matches.is_empty()
    }

    /// Whether the conditions hold for `a` at `now`, with why not.
    pub fn check(&self, a: &Attributes, now: Timestamp) -> Outcome {
        match self.test(a, &|| now) {
            Test::Holds => Outcome::Holds,
            Test::Unknown => Outcome::Unknown(self.why(Test::Unknown, a, now)),
            t => Outcome::Fails(self.why(t, a, now)),
        }
    }

    /// [`Conditions::check`] without the words: what a decision needs.
    /// `now` is asked only when a time window is to be checked.
    pub(crate) fn test(&self, a: &Attributes, now: &dyn Fn() -> Timestamp) -> Test {
        if !self.windows.is_empty() {
            let t = now();
            if !self.windows.iter().any(|w| w.contains(t)) {
                return Test::Time;
            }
        }
        for (i, m) in self.matches.iter().enumerate() {
            if m.values.iter().any(|v| v == m.value(a)) == m.negate {
                return Test::Attribute(i);
            }
        }
        if !self.cidrs.is_empty() {
            let Some(ip) = a.source else {
                return Test::Unknown;
            };
            if !self.cidrs.iter().any(|n| n.contains(ip)) {
                return Test::Cidr;
            }
        }
        Test::Holds
    }

    /// Why `t` (not [`Test::Holds`]).
    pub(crate) fn why(&self, t: Test, a: &Attributes, now: Timestamp) -> String {
        let cidrs = || {
            let list: Vec<String> = self.cidrs.iter().map(ToString::to_string).collect();
            list.join(", ")
        };
        match t {
            Test::Holds => String::new(),
            Test::Time => {
                let list: Vec<&str> = self.windows.iter().map(|w| w.text.as_str()).collect();
                format!(
                    "the time {now:.0} is outside its time windows [{}]",
                    list.join("; ")
                )
            }
            Test::Attribute(i) => {
                let m = &self.matches[i];
                let op = if m.negate { "NotIn" } else { "In" };
                format!(
                    "the request's {} {} is not {op} {:?}",
                    ATTRIBUTES[m.attribute],
                    kubeforge_apimachinery::gofmt::quote(m.value(a)),
                    m.values
                )
            }
            Test::Cidr => format!(
                "the client address {} is outside its source CIDRs [{}]",
                a.source.map(|ip| ip.to_string()).unwrap_or_default(),
                cidrs()
            ),
            Test::Unknown => format!(
                "the client address is unknown, so its source CIDRs [{}] cannot be checked",
                cidrs()
            ),
        }
    }
}

/// What [`Conditions::test`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    Holds,
    /// No time window contains now.
    Time,
    /// This request-attribute match fails.
    Attribute(usize),
    /// The client address is outside the CIDRs.
    Cidr,
    /// The client address is unknown.
    Unknown,
}

impl Match {
    fn value<'a>(&self, a: &'a Attributes) -> &'a str {
        match self.attribute {
            0 => &a.verb,
            1 => &a.namespace,
            2 => &a.api_group,
            3 => &a.resource,
            4 => &a.subresource,
            5 => &a.name,
            _ => &a.path,
        }
    }
}

impl Window {
    fn contains(&self, now: Timestamp) -> bool {
        // The zone's offset at `now`, then plain arithmetic: cheaper than
        // a whole zoned datetime on every decision.
        let t = now.as_second();
        let (from, until, offset) = self.span;
        let offset = if (from..until).contains(&t) {
            offset
        } else {
            self.zone.to_offset(now).seconds()
        };
        let local = t + i64::from(offset);
        let minute = (local.rem_euclid(86_400) / 60) as u16;
        // 1970-01-01 was a Thursday (3, Monday being 0).
        let today = (local.div_euclid(86_400) + 3).rem_euclid(7) as u8;
        let yesterday = (today + 6) % 7;
        let opens = |d: u8| self.days & (1 << d) != 0;
        if self.start < self.end {
            opens(today) && (self.start..self.end).contains(&minute)
        } else {
            // Past midnight: from start today, or until end if it opened
            // yesterday.
            (opens(today) && minute >= self.start) || (opens(yesterday) && minute < self.end)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn compile(v: serde_json::Value) -> Result<Conditions, Vec<Cause>> {
        let raw: RawConditions = serde_json::from_value(v).unwrap();
        let mut out = Vec::new();
        let c = Conditions::compile(&raw, "spec.conditions", &mut out);
        if out.is_empty() { Ok(c) } else { Err(out) }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The cached offset span gives what the zone's own lookup gives, on
    /// both sides of the daylight-saving changes around now.
    #[test]
    fn the_offset_span_agrees_with_the_zone() {
        let c = compile(serde_json::json!({"timeWindows": [
            {"days": ["Mon", "Wed", "Sun"], "start": "01:30", "end": "03:30", "timeZone": "Europe/Berlin"},
            {"start": "22:00", "end": "02:00", "timeZone": "America/New_York"},
            {"start": "09:00", "end": "17:00", "timeZone": "UTC"}]}))
        .unwrap();
        let now = Timestamp::now().as_second();
        for w in &c.windows {
            let (from, until, _) = w.span;
            assert!(from <= now && now < until, "{} {:?}", w.text, w.span);
            let mut slow = w.clone();
            slow.span = (0, 0, 0);
            // Every 10 minutes for 400 days either side.
            for step in (-57_600..57_600).map(|k| k * 600) {
                let t = Timestamp::from_second(now + step).unwrap();
                assert_eq!(w.contains(t), slow.contains(t), "{} at {t}", w.text);
            }
        }
    }

    fn request() -> Attributes {
        Attributes::resource(
            crate::UserInfo::new("u", ["g"]),
            "get",
            "dev",
            "",
            "v1",
            "pods",
            "",
            "p",
        )
    }

    #[test]
    fn time_windows_follow_days_zones_and_midnight() {
        let c = compile(serde_json::json!({"timeWindows": [
            {"days": ["Mon", "tuesday"], "start": "09:00", "end": "17:00", "timeZone": "Europe/Berlin"}
        ]}))
        .unwrap();
        let a = request();
        // 2026-12-01 is a Tuesday; Berlin is UTC+1 in December.
        assert_eq!(c.check(&a, at("2026-12-01T08:00:00Z")), Outcome::Holds);
        assert!(matches!(
            c.check(&a, at("2026-12-01T07:59:00Z")),
            Outcome::Fails(_)
        ));
        assert!(matches!(
            c.check(&a, at("2026-12-01T16:00:00Z")),
            Outcome::Fails(_)
        ));
        assert!(matches!(
            c.check(&a, at("2026-12-02T10:00:00Z")),
            Outcome::Fails(_)
        ));
        let night = compile(serde_json::json!({"timeWindows": [
            {"days": ["Fri"], "start": "22:00", "end": "06:00"}
        ]}))
        .unwrap();
        // 2026-12-04 is a Friday.
        assert_eq!(night.check(&a, at("2026-12-04T23:00:00Z")), Outcome::Holds);
        assert_eq!(night.check(&a, at("2026-12-05T05:59:00Z")), Outcome::Holds);
        assert!(matches!(
            night.check(&a, at("2026-12-05T23:00:00Z")),
            Outcome::Fails(_)
        ));
        assert!(matches!(
            night.check(&a, at("2026-12-04T05:00:00Z")),
            Outcome::Fails(_)
        ));
        let all_day =
            compile(serde_json::json!({"timeWindows": [{"start": "00:00", "end": "24:00"}]}))
                .unwrap();
        assert_eq!(
            all_day.check(&a, at("2026-12-06T23:59:59Z")),
            Outcome::Holds
        );
    }

    #[test]
    fn cidrs_need_a_known_address_and_attributes_match() {
        let c = compile(serde_json::json!({
            "sourceCIDRs": ["10.0.0.0/8", "::1/128"],
            "requestAttributes": [{"attribute": "verb", "operator": "NotIn", "values": ["delete"]}]
        }))
        .unwrap();
        let mut a = request();
        let now = at("2026-12-01T00:00:00Z");
        assert!(matches!(c.check(&a, now), Outcome::Unknown(_)));
        a.source = Some("10.1.2.3".parse().unwrap());
        assert_eq!(c.check(&a, now), Outcome::Holds);
        a.source = Some("127.0.0.1".parse().unwrap());
        match c.check(&a, now) {
            Outcome::Fails(why) => assert!(why.contains("127.0.0.1 is outside"), "{why}"),
            o => panic!("{o:?}"),
        }
        a.source = Some("::1".parse().unwrap());
        a.verb = "delete".into();
        assert!(matches!(c.check(&a, now), Outcome::Fails(_)));
    }

    #[test]
    fn bad_conditions_name_their_field() {
        let errs = compile(serde_json::json!({
            "timeWindows": [{"days": ["Funday"], "start": "25:00", "end": "", "timeZone": "Mars/Olympus"}],
            "sourceCIDRs": ["10.0.0.0/33"],
            "requestAttributes": [{"attribute": "colour", "operator": "Like", "values": []}]
        }))
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(Cause::to_error_string).collect();
        assert_eq!(
            text,
            vec![
                r#"spec.conditions.timeWindows[0].days[0]: Unsupported value: "Funday": supported values: "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun""#,
                r#"spec.conditions.timeWindows[0].start: Invalid value: "25:00": must be HH:MM in 24-hour time (00:00 to 23:59)"#,
                "spec.conditions.timeWindows[0].end: Required value",
                r#"spec.conditions.timeWindows[0].timeZone: Invalid value: "Mars/Olympus": unknown time zone"#,
                r#"spec.conditions.sourceCIDRs[0]: Invalid value: "10.0.0.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"#,
                r#"spec.conditions.requestAttributes[0].attribute: Unsupported value: "colour": supported values: "verb", "namespace", "apiGroup", "resource", "subresource", "name", "path""#,
                r#"spec.conditions.requestAttributes[0].operator: Unsupported value: "Like": supported values: "In", "NotIn""#,
                "spec.conditions.requestAttributes[0].values: Required value: at least one value is required",
            ]
        );
    }
}
