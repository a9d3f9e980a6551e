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
