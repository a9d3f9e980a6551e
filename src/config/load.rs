//! The layers under the settings: the embedded defaults, the TOML file, the `AUTOFACTURA__…`
//! environment, merged into one table before it is typed; and error messages that never quote
//! a value (it may be a secret in the wrong place).

use std::path::Path;

use super::secret::looks_secret;
use super::{ConfigError, ENV_PREFIX};

/// A TOML or serde message with the values it quotes taken out (`invalid type: string "…"`,
/// `integer `…``): the value may be a secret in the wrong place. Keys (`unknown field `x``)
/// stay, since they are what to fix.
pub(super) fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let next = [
            ("string \"", '"'),
            ("integer `", '`'),
            ("floating point `", '`'),
            ("character `", '`'),
            ("boolean `", '`'),
        ]
        .into_iter()
        .filter_map(|(open, close)| rest.find(open).map(|i| (i, open, close)))
        .min_by_key(|(i, _, _)| *i);
        let Some((i, open, close)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + open.len()]);
        out.push_str("(value not shown)");
        let after = &rest[i + open.len()..];
        match after.find(close) {
            Some(end) => {
                out.push(close);
                rest = &after[end + 1..];
            }
            None => {
                out.push(close);
                return out;
            }
        }
    }
}

/// Where the TOML text is wrong and why, without the offending line: it may hold a secret.
pub(super) fn syntax_error(path: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e
        .span()
        .map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: ")
        })
        .unwrap_or_default();
    ConfigError::Syntax {
        path: path.to_owned(),
        message: format!("{at}{}", without_values(e.message())),
    }
}

pub(super) fn read_file(p: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
        path: p.to_owned(),
        source,
    })
}

/// Deep-merges `over` into `base` (tables merge, everything else replaces).
pub(super) fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Sets `path` to the environment value `raw`, typed like the value it replaces: an integer
/// where the default is an integer, a list where it is a list (TOML array syntax or
/// comma-separated), a string otherwise. So a password of digits stays a string.
pub(super) fn set_path(t: &mut toml::Table, path: &[String], raw: &str) -> Result<(), ConfigError> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut cur = t;
    for p in parents {
        let entry = cur
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(inner) => inner,
            _ => {
                return Err(ConfigError::Shape(format!(
                    "{ENV_PREFIX}{}: `{p}` is not a section",
                    path.join("__").to_uppercase()
                )));
            }
        };
    }
    let name = format!("{ENV_PREFIX}{}", path.join("__").to_uppercase());
    // The value is echoed only under a key that cannot hold a secret.
    let secret = path.iter().any(|p| looks_secret(p) || p.ends_with("url"));
    let bad = |what: &str| {
        if secret {
            ConfigError::Shape(format!("{name}: expected {what} (value not shown)"))
        } else {
            ConfigError::Shape(format!("{name}={raw:?}: expected {what}"))
        }
    };
    let value = match cur.get(last) {
        Some(toml::Value::Integer(_)) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| bad("an integer"))?)
        }
        Some(toml::Value::Boolean(_)) => {
            toml::Value::Boolean(raw.trim().parse().map_err(|_| bad("true or false"))?)
        }
        Some(toml::Value::Float(_)) => {
            toml::Value::Float(raw.trim().parse().map_err(|_| bad("a number"))?)
        }
        Some(toml::Value::Array(_)) if raw.trim_start().starts_with('[') => {
            let t: toml::Table = format!("v = {raw}")
                .parse()
                .map_err(|_| bad("a TOML array"))?;
            t.get("v").cloned().ok_or_else(|| bad("a TOML array"))?
        }
        Some(toml::Value::Array(_)) => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.into()))
                .collect(),
        ),
        _ => toml::Value::String(raw.to_owned()),
    };
    cur.insert(last.clone(), value);
    Ok(())
}

/// Types the merged table into [`super::Settings`]. An environment value is a string unless a
/// default of another type sits under its key ([`set_path`]); where the settings struct itself
/// expects something else (a number of a key without a default, an `Option<u64>`, …), its
/// error names the key, and the value is read again as what the struct asked for. So every key
/// can be set from the environment, typed by the struct, not by the embedded defaults.
pub(super) fn typed(
    mut merged: toml::Table,
    from_env: &[(Vec<String>, String)],
) -> Result<super::Settings, ConfigError> {
    // Each round retypes one environment value, so this many rounds always suffice.
    for _ in 0..=from_env.len() {
        let e = match merged.clone().try_into::<super::Settings>() {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let message = e.to_string();
        let retyped = from_env.iter().find_map(|(path, raw)| {
            let key = path.join(".");
            (message.contains("invalid type: string") && message.contains(&format!("`{key}`")))
                .then(|| as_expected(&message, raw))
                .flatten()
                .map(|v| (path, v))
        });
        match retyped {
            Some((path, value)) => set_typed(&mut merged, path, value),
            // Its Display names the key (`in `admin.password``); no source line, as there is no text.
            None => {
                return Err(ConfigError::Shape(
                    without_values(message.trim()).replace('\n', " "),
                ));
            }
        }
    }
    Err(ConfigError::Shape(
        "the environment's values could not be typed".into(),
    ))
}

/// `raw` read as what serde's `message` says was expected (`expected u64`, `a boolean`,
/// `a sequence`, …); `None` when it cannot be read so (the error is then reported as is).
fn as_expected(message: &str, raw: &str) -> Option<toml::Value> {
    let expected = message.split("expected").nth(1).unwrap_or("");
    let raw = raw.trim();
    let value = if expected.contains("sequence") {
        if raw.starts_with('[') {
            format!("v = {raw}")
                .parse::<toml::Table>()
                .ok()?
                .remove("v")?
        } else {
            toml::Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.into()))
                    .collect(),
            )
        }
    } else if expected.contains("bool") {
        toml::Value::Boolean(raw.parse().ok()?)
    } else if expected.contains("f32") || expected.contains("f64") || expected.contains("float") {
        toml::Value::Float(raw.parse().ok()?)
    } else if [
        "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize", "integer",
    ]
    .iter()
    .any(|t| expected.contains(t))
    {
        toml::Value::Integer(raw.parse().ok()?)
    } else {
        return None;
    };
    Some(value)
}

fn set_typed(t: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = t;
    for p in parents {
        match cur.get_mut(p) {
            Some(toml::Value::Table(inner)) => cur = inner,
            _ => return,
        }
    }
    cur.insert(last.clone(), value);
}

/// Replaces every `NAME_file = "/path"` key with `NAME` = the file's content (trailing newline
/// removed), as container platforms mount secrets as files. `NAME` set too (to anything but
/// its embedded default, in `defaults`) is refused: which one is meant?
pub(super) fn secret_files(t: &mut toml::Table, defaults: &toml::Table) -> Result<(), ConfigError> {
    fn walk(
        t: &mut toml::Table,
        defaults: Option<&toml::Table>,
        at: &str,
    ) -> Result<(), ConfigError> {
        let keys: Vec<String> = t.keys().cloned().collect();
        for k in keys {
            let here = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if let Some(toml::Value::Table(inner)) = t.get_mut(&k) {
                let below = defaults
                    .and_then(|d| d.get(&k))
                    .and_then(toml::Value::as_table);
                walk(inner, below, &here)?;
                continue;
            }
            let Some(name) = k.strip_suffix("_file") else {
                continue;
            };
            let Some(toml::Value::String(path)) = t.get(&k).cloned() else {
                continue;
            };
            let default = defaults.and_then(|d| d.get(name));
            if t.get(name).is_some_and(|v| Some(v) != default) {
                return Err(ConfigError::Shape(format!(
                    "{here} and {at}{}{name} are both set: keep one",
                    if at.is_empty() { "" } else { "." }
                )));
            }
            let text = read_file(Path::new(&path))?;
            t.remove(&k);
            t.insert(
                name.to_owned(),
                toml::Value::String(text.trim_end_matches(['\n', '\r']).to_owned()),
            );
        }
        Ok(())
    }
    walk(t, Some(defaults), "")
}

/// Replaces every secret in `t` by `[redacted]` (keys that look secret) and the password of
/// every URL (`postgres://user:…@host`), for `config check`.
pub(super) fn redact(t: &mut toml::Table) {
    for (k, v) in t.iter_mut() {
        match v {
            toml::Value::Table(inner) => redact(inner),
            toml::Value::String(_) | toml::Value::Array(_) if looks_secret(k) => {
                *v = toml::Value::String("[redacted]".into())
            }
            toml::Value::String(s) if s.contains("://") => {
                *s = super::secret::redact_url(s);
            }
            _ => {}
        }
    }
}
