//! Every key of the settings struct can be set from the environment, typed by the struct: the
//! list of keys is not written here but asked of the struct itself (its `deny_unknown_fields`
//! names every field, its errors say what type each expects), so a key added tomorrow is
//! covered without touching this file.

use super::load::typed;
use super::tests::stripe_secrets;
use super::*;

const EXAMPLE: &str = include_str!("../../autofactura.example.toml");

fn table(text: &str) -> toml::Table {
    text.parse().expect("TOML")
}

/// Maps that are empty in the defaults and the example, each given one entry so that the
/// keys of its values are tried too.
const MAP_ENTRIES: &str = r#"
[invoice.products.prod_probe]
clave_prod_serv = "86111604"
clave_unidad = "E48"
unidad = "Servicio"
objeto_imp = "02"

[fx.rates]
USD = "17.5025"
"#;

/// The example file over the defaults: the base every key is set over.
fn base() -> toml::Table {
    let mut t = table(DEFAULTS);
    merge(&mut t, table(EXAMPLE));
    merge(&mut t, table(MAP_ENTRIES));
    t
}

fn get<'a>(t: &'a toml::Table, path: &[String]) -> Option<&'a toml::Value> {
    let (last, parents) = path.split_last()?;
    let mut cur = t;
    for p in parents {
        cur = cur.get(p)?.as_table()?;
    }
    cur.get(last)
}

fn put(t: &mut toml::Table, path: &[String], v: toml::Value) {
    let (last, parents) = path.split_last().expect("a path");
    let mut cur = t;
    for p in parents {
        cur = cur
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("a table");
    }
    cur.insert(last.clone(), v);
}

/// The serde error of typing `t` (no environment), if any.
fn type_error(t: &toml::Table) -> Option<String> {
    let mut t = t.clone();
    let _ = pac::take_unknown_kind(&mut t);
    typed(t, &[]).err().map(|e| e.to_string())
}

/// The fields of the table at `at`, as the struct names them when it refuses an unknown one.
/// A table that takes any key (a map, like `[forma_pago.mercadopago]`) has the keys it holds.
fn fields_of(base: &toml::Table, at: &[String]) -> Vec<String> {
    let mut probe = base.clone();
    let mut path = at.to_vec();
    path.push("zz_probe".into());
    put(&mut probe, &path, toml::Value::String("zz".into()));
    let err = type_error(&probe).unwrap_or_default();
    let Some(list) = err.split("unknown field `zz_probe`, expected ").nth(1) else {
        let held = get(base, at).and_then(toml::Value::as_table);
        let keys: Vec<String> = held
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        assert!(
            !keys.is_empty(),
            "[{}] takes any key and has none to try: give it a default",
            at.join(".")
        );
        return keys;
    };
    list.split(", ")
        .filter_map(|f| f.split('`').nth(1))
        .map(str::to_owned)
        .collect()
}

/// What the struct expects at `path`, asked by putting a string there: `None` when a string
/// is what it takes, else serde's `expected …` (`u64`, `a boolean`, `struct PacConfig`, `one
/// of `a`, `b``).
fn expects(base: &toml::Table, path: &[String]) -> Option<String> {
    let mut probe = base.clone();
    put(&mut probe, path, toml::Value::String("zz".into()));
    let err = type_error(&probe)?;
    let key = format!("`{}`", path.join("."));
    if !err.contains(&key) {
        return None;
    }
    Some(err.split("expected ").nth(1).unwrap_or("").to_owned())
}

/// A value of the type the struct expects at `path`: the base's own when it has one (numbers
/// one more, booleans flipped, so the variable visibly changes something), else one built
/// from what the struct expects.
fn sample(base: &toml::Table, path: &[String], expected: Option<&str>) -> toml::Value {
    match (get(base, path), expected) {
        (Some(toml::Value::Integer(n)), _) => toml::Value::Integer(n + 1),
        (Some(toml::Value::Boolean(b)), _) => toml::Value::Boolean(!b),
        (Some(v), _) => v.clone(),
        (None, None) => toml::Value::String("zz-sample".into()),
        // Serde names the variants of an enum as "one of `a`, `b`", or "`a` or `b`" for two.
        (None, Some(e)) if e.contains("one of") || e.starts_with('`') => {
            toml::Value::String(e.split('`').nth(1).unwrap_or("zz").to_owned())
        }
        (None, Some(e)) if e.contains("bool") => toml::Value::Boolean(true),
        (None, Some(e)) if e.contains("sequence") => {
            toml::Value::Array(vec![toml::Value::String("zz-sample".into())])
        }
        (None, Some(e)) if e.contains('f') && !e.contains("struct") => toml::Value::Float(1.5),
        (None, Some(_)) => toml::Value::Integer(7),
    }
}

/// How the environment spells `v`: TOML array syntax for lists, the bare text otherwise.
fn env_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(_) => v.to_string(),
        other => other.to_string(),
    }
}

/// Every leaf key under `at`, with what the struct expects there (recursing into sub-tables).
fn leaves(base: &toml::Table, at: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
    for field in fields_of(base, at) {
        let mut path = at.to_vec();
        path.push(field);
        let expected = expects(base, &path);
        let is_table = get(base, &path).is_some_and(toml::Value::is_table)
            || expected
                .as_deref()
                .is_some_and(|e| e.starts_with("struct") || e.contains("map"));
        // A table holding its own kind (`[pac.backup]` is a `[pac]`) is walked once.
        if is_table && at.contains(path.last().expect("a field")) {
            continue;
        }
        if is_table {
            let mut with_table = base.clone();
            if get(base, &path).is_none() {
                put(
                    &mut with_table,
                    &path,
                    toml::Value::Table(toml::Table::new()),
                );
            }
            leaves(&with_table, &path, out);
        } else {
            out.push((path, expected));
        }
    }
}

/// The outcome of loading, comparable: the settings' `Debug` or the error's text.
fn outcome(file: &toml::Table, env: &[(String, String)]) -> Result<String, String> {
    let text = toml::to_string(file).expect("serialize");
    Settings::from_parts(Some(&text), env)
        .map(|s| format!("{s:?}"))
        .map_err(|e| e.to_string())
}

#[test]
fn every_key_round_trips_through_its_environment_variable() {
    let base = base();
    let mut keys = Vec::new();
    leaves(&base, &[], &mut keys);
    assert!(keys.len() > 60, "the struct named only {} keys", keys.len());
    let mut failures = Vec::new();
    for (path, expected) in &keys {
        let value = sample(&base, path, expected.as_deref());
        // The same value, once in the file and once in the environment, over the same base.
        let mut in_file = base.clone();
        put(&mut in_file, path, value.clone());
        let var = format!("{ENV_PREFIX}{}", path.join("__").to_uppercase());
        let from_file = outcome(&in_file, &[]);
        let from_env = outcome(&base, &[(var.clone(), env_text(&value))]);
        if from_file != from_env {
            failures.push(format!(
                "{var}={}: file gives {from_file:?}, environment gives {from_env:?}",
                env_text(&value)
            ));
        }
        // A typing error (not a validation one) in the file means the sample is wrong here.
        if let Err(e) = &from_file
            && !e.starts_with("configuration is not valid")
        {
            failures.push(format!("{var}: the sample {value} is not typed: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_number_without_a_default_is_typed_by_the_struct() {
    // The PAC's timeouts have no default in config/default.toml (they are PacConfig's own):
    // they used to be read as strings and refused.
    let env = [(
        "AUTOFACTURA__PAC__REQUEST_TIMEOUT".to_owned(),
        "45".to_owned(),
    )];
    let s = Settings::from_parts(None, &env).expect("typed by the struct");
    assert_eq!(s.pac.request_timeout, 45);
    let bad = [(
        "AUTOFACTURA__PAC__REQUEST_TIMEOUT".to_owned(),
        "soon".to_owned(),
    )];
    let err = Settings::from_parts(None, &bad).expect_err("not a number");
    assert!(err.to_string().contains("pac.request_timeout"), "{err}");
}

#[test]
fn secrets_come_from_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mp_secret");
    std::fs::write(&path, "from-a-file\n").expect("write");
    let file = format!(
        "[mercadopago]\nwebhook_secret_file = \"{}\"\n",
        path.display()
    );
    let s = Settings::from_parts(Some(&file), &[]).expect("settings");
    assert_eq!(
        s.mercadopago
            .webhook_secret
            .as_ref()
            .map(SecretString::expose),
        Some("from-a-file")
    );
    // From the environment too, as container platforms mount them.
    let env = [(
        "AUTOFACTURA__ADMIN__PASSWORD_FILE".to_owned(),
        path.display().to_string(),
    )];
    let s = Settings::from_parts(None, &env).expect("settings");
    assert_eq!(
        s.admin.password.as_ref().map(SecretString::expose),
        Some("from-a-file")
    );
    // A list with a default: the file's content, comma-separated.
    let list = dir.path().join("stripe");
    std::fs::write(&list, "whsec_one,whsec_two\n").expect("write");
    let env = [(
        "AUTOFACTURA__STRIPE__WEBHOOK_SECRETS_FILE".to_owned(),
        list.display().to_string(),
    )];
    let s = Settings::from_parts(None, &env).expect("settings");
    let secrets = stripe_secrets(&s);
    assert_eq!(secrets, ["whsec_one", "whsec_two"]);
    let both = format!("{file}webhook_secret = \"x\"\n");
    let err = Settings::from_parts(Some(&both), &[]).expect_err("both");
    assert!(
        err.to_string().contains("mercadopago.webhook_secret_file"),
        "{err}"
    );
    let missing = "[admin]\npassword_file = \"/nonexistent/autofactura-secret\"\n";
    let err = Settings::from_parts(Some(missing), &[]).expect_err("missing file");
    assert!(
        err.to_string().contains("/nonexistent/autofactura-secret"),
        "{err}"
    );
}

#[test]
fn config_check_prints_the_merged_configuration_redacted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[database]\nurl = \"postgres://app:hunter2@db:5432/af\"\n[admin]\npassword = \"s3cret-pass\"\n",
    )
    .expect("write");
    let text = Settings::check(Some(&path)).expect("valid");
    assert!(
        !text.contains("hunter2") && !text.contains("s3cret-pass"),
        "{text}"
    );
    assert!(
        text.contains("postgres://app:[redacted]@db:5432/af"),
        "{text}"
    );
    assert!(text.contains("concurrency = 8"), "{text}");
    std::fs::write(&path, "[worker]\nconcurrency = \"many\"\n").expect("write");
    let err = Settings::check(Some(&path)).expect_err("bad");
    assert!(err.to_string().contains("worker.concurrency"), "{err}");
}
