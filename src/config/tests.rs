use super::*;

/// The Stripe webhook secrets `s` holds, in the clear (env_tests reads them too).
pub(super) fn stripe_secrets(s: &Settings) -> Vec<&str> {
    s.stripe
        .webhook_secrets
        .iter()
        .map(SecretString::expose)
        .collect()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The error that loading `file` ends in.
fn refused(file: &str) -> String {
    Settings::from_parts(Some(file), &[])
        .expect_err(file)
        .to_string()
}

fn assert_names_all(err: &str, needles: &[&str]) {
    for needle in needles {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
}

#[test]
fn embedded_defaults_are_valid_and_use_sqlite_and_the_sandbox() {
    let s = Settings::defaults().expect("defaults");
    assert!(s.is_sqlite());
    assert_eq!(s.pac_kind(), "sandbox");
    assert_eq!(s.emisor.serie, "A");
    assert_eq!(s.worker.concurrency, 8);
    assert_eq!(s.api.wait_for_stamp_ms, 15_000);
    assert_eq!(s.api.webhook_retry_seconds.len(), 9);
    assert_eq!(s.api.webhook_retry_seconds.last(), Some(&86_400));
    assert_eq!(
        s.stripe.webhook_secrets.len(),
        1,
        "sandbox secret filled in"
    );
}

#[test]
fn the_example_file_documents_valid_settings() {
    let text = include_str!("../../autofactura.example.toml");
    let s = Settings::from_parts(Some(text), &[]).expect("example config");
    assert_eq!(s.stripe.webhook_secrets.len(), 2);
    assert_eq!(s.pac_kind(), "sandbox");
}

#[test]
fn environment_overrides_the_file_with_the_type_of_the_default() {
    let file = "[stripe]\nwebhook_secrets = [\"whsec_file\"]\n[worker]\nconcurrency = 2\n";
    let s = Settings::from_parts(
        Some(file),
        &env(&[
            ("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS", "whsec_a, whsec_b"),
            ("AUTOFACTURA__WORKER__CONCURRENCY", "3"),
            ("AUTOFACTURA__ADMIN__PASSWORD", "12345678"),
            ("AUTOFACTURA__PAC__KIND", "sandbox"),
            ("UNRELATED", "x"),
        ]),
    )
    .expect("settings");
    let secrets = stripe_secrets(&s);
    assert_eq!(secrets, ["whsec_a", "whsec_b"]);
    assert_eq!(s.worker.concurrency, 3);
    assert_eq!(
        s.admin.password.as_ref().map(SecretString::expose),
        Some("12345678")
    );
}

#[test]
fn validation_lists_every_problem_with_its_key() {
    let file = "[server]\nlisten = \"localhost\"\n[emisor]\nrfc = \"nope\"\nlugar_expedicion = \"123\"\n[pac]\nkind = \"acme\"\n";
    assert_names_all(
        &refused(file),
        &[
            "[server] listen",
            "[emisor] rfc",
            "[emisor] lugar_expedicion",
            "[pac] kind",
        ],
    );
}

#[test]
fn unknown_keys_are_reported() {
    let err =
        Settings::from_parts(Some("[stripe]\nwebhook_secret = \"x\"\n"), &[]).expect_err("typo");
    assert!(err.to_string().contains("webhook_secret"), "{err}");
}

#[test]
fn a_real_pac_refuses_the_sandbox_secrets_and_needs_a_csd() {
    let err = Settings::from_parts(Some("[pac]\nkind = \"sw\"\n"), &[])
        .expect_err("needs CSD")
        .to_string();
    assert!(err.contains("csd_cer"), "{err}");
    let file = format!(
        "[pac]\nkind = \"sw\"\n[stripe]\nwebhook_secrets = [\"{SANDBOX_STRIPE_SECRET}\"]\n"
    );
    let err = Settings::from_parts(Some(&file), &[])
        .expect_err("sandbox secret")
        .to_string();
    assert!(err.contains("sandbox webhook secrets"), "{err}");
}

#[test]
fn debug_output_redacts_secrets() {
    let file = "[database]\nurl = \"postgres://app:hunter2@db/af\"\n[stripe]\nwebhook_secrets = [\"whsec_topsecret\"]\n\
                    [mercadopago]\naccess_token = \"APP_USR-tok\"\n[admin]\npassword = \"pw-secret\"\npassword_hash = \"k-secret\"\n";
    let s = Settings::from_parts(Some(file), &[]).expect("settings");
    let dump = format!("{s:?}");
    for secret in [
        "hunter2",
        "whsec_topsecret",
        "APP_USR-tok",
        "pw-secret",
        "k-secret",
    ] {
        assert!(!dump.contains(secret), "{secret} leaked: {dump}");
    }
    assert!(dump.contains("postgres://app:[redacted]@db/af"));
}

#[test]
fn urls_are_redacted_through_every_at_and_secret_query_parameters() {
    for (url, secret, keeps) in [
        (
            "postgres://app:hunter2@db/af",
            "hunter2",
            "postgres://app:[redacted]@db/af",
        ),
        // A password holding `@`: the user info ends at the last one.
        (
            "postgres://app:p@ss@word@db:5432/af",
            "ss@word",
            "@db:5432/af",
        ),
        (
            "postgres://app@db/af?sslmode=require&password=hunter2",
            "hunter2",
            "postgres://app@db/af?sslmode=require&password=[redacted]",
        ),
        (
            "postgres://db/af?sslpassword=k3y&application_name=af",
            "k3y",
            "application_name=af",
        ),
        (
            "https://erp.example/hooks?token=t0ken",
            "t0ken",
            "https://erp.example/hooks?",
        ),
        (
            "https://u:pw@erp.example/h?x=a@b",
            "pw",
            "https://u:[redacted]@",
        ),
    ] {
        let r = redact_url(url);
        assert!(!r.contains(secret), "{url} → {r}");
        assert!(r.contains(keeps), "{url} → {r}");
    }
    assert_eq!(
        url_for_log("https://erp.example/hooks?token=t0ken&id=1"),
        "https://erp.example/hooks?[query not shown]"
    );
    assert_eq!(
        url_for_log("https://erp.example/hooks"),
        "https://erp.example/hooks"
    );
    // The settings dump shows the merchant URL without its query.
    let s = Settings::from_parts(
        Some(
            "[api]\nwebhook_url = \"https://erp.example/h?key=LEAK1\"\n\
                 webhook_secret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZg==\"\n",
        ),
        &[],
    )
    .expect("settings");
    let dump = format!("{s:?}");
    assert!(
        !dump.contains("LEAK1") && dump.contains("erp.example/h"),
        "{dump}"
    );
}

#[test]
fn configuration_errors_never_echo_a_secret() {
    // A TOML syntax error on the line of a secret: the place, not the line.
    let err = Settings::from_parts(Some("[stripe]\nwebhook_secrets = [whsec_LEAK2]\n"), &[])
        .expect_err("syntax")
        .to_string();
    assert!(!err.contains("LEAK2") && err.contains("line 2"), "{err}");
    // A secret of the wrong type.
    for file in [
        "[admin]\npassword = 31415926\n",
        "[mercadopago]\nwebhook_secret = 31415926\n",
        "[mercadopago]\naccess_token = [\"31415926\"]\n",
    ] {
        let err = refused(file);
        assert!(!err.contains("31415926"), "{err}");
    }
    let err = refused("[worker]\nconcurrency = \"LEAK3\"\n");
    assert!(
        !err.contains("LEAK3") && err.contains("worker.concurrency"),
        "{err}"
    );
    // An environment override that does not parse.
    let err = Settings::from_parts(
        None,
        &env(&[("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS", "[\"whsec_LEAK4\"")]),
    )
    .expect_err("bad array")
    .to_string();
    assert!(
        !err.contains("LEAK4") && err.contains("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS"),
        "{err}"
    );
    // Where no secret can be, the value helps.
    let err = Settings::from_parts(None, &env(&[("AUTOFACTURA__WORKER__CONCURRENCY", "eight")]))
        .expect_err("bad integer")
        .to_string();
    assert!(err.contains("eight"), "{err}");
}

#[test]
fn exposure_beyond_loopback_needs_real_secrets_and_password() {
    let public = "[server]\nlisten = \"0.0.0.0:8080\"\n";
    let s = Settings::from_parts(Some(public), &[]).expect("settings");
    let err = s.check_exposure().expect_err("sandbox secrets").to_string();
    for key in [
        "[stripe] webhook_secrets",
        "[mercadopago] webhook_secret",
        "[mercadopago] access_token",
    ] {
        assert!(err.contains(key), "{key} missing from: {err}");
    }
    let own = format!(
        "{public}[stripe]\nwebhook_secrets = [\"whsec_mine\"]\n[mercadopago]\n\
             webhook_secret = \"mine\"\naccess_token = \"APP_USR-mine\"\n"
    );
    let s = Settings::from_parts(Some(&own), &[]).expect("settings");
    assert!(s.check_exposure().is_ok());
    let err = Settings::from_parts(
        Some(&format!("{own}[admin]\npassword = \"change-me\"\n")),
        &[],
    )
    .expect("settings")
    .check_exposure()
    .expect_err("example password")
    .to_string();
    assert!(err.contains("[admin] password"), "{err}");
    // The admin on a loopback listener of its own may keep it; a proxy in front may not.
    let private = format!("{own}[admin]\npassword = \"change-me\"\nlisten = \"127.0.0.1:8081\"\n");
    assert!(
        Settings::from_parts(Some(&private), &[])
            .expect("settings")
            .check_exposure()
            .is_ok()
    );
    let proxied = "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n";
    let err = Settings::from_parts(Some(proxied), &[])
        .expect("settings")
        .check_exposure()
        .expect_err("behind a proxy")
        .to_string();
    assert!(err.contains("trusted_proxies"), "{err}");
    // On loopback the sandbox conveniences stay.
    assert!(
        Settings::defaults()
            .expect("defaults")
            .check_exposure()
            .is_ok()
    );
    let err = Settings::from_parts(Some("[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n"), &[])
        .expect_err("bad block")
        .to_string();
    assert!(err.contains("[server] trusted_proxies"), "{err}");
}

#[test]
fn the_merchant_webhook_secret_is_checked_at_load_and_decoded_by_its_type() {
    let err = Settings::from_parts(Some("[api]\nwebhook_secret = \"whsec_not base64!\"\n"), &[])
        .expect_err("bad secret")
        .to_string();
    assert!(
        err.contains("[api] webhook_secret must be whsec_ followed by base64"),
        "{err}"
    );
    let s = Settings::from_parts(
        Some("[api]\nwebhook_secret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZg==\"\n"),
        &[],
    )
    .expect("settings");
    let secret = s.api.webhook_secret.expect("secret");
    assert_eq!(secret.key().as_deref(), Some(&b"0123456789abcdef"[..]));
    assert_eq!(format!("{secret:?}"), "[redacted]");
    assert!(WebhookSecret::decode("MDEyMzQ1Njc4OWFiY2RlZg==").is_none());
}

#[test]
fn the_pac_table_is_typed_at_load() {
    let s = Settings::from_parts(
        Some("[pac]\nkind = \"sandbox\"\nrequest_timeout = 7\n[pac.backup]\nkind = \"finkok\"\nenvironment = \"test\"\n"),
        &[],
    )
    .expect("settings");
    assert_eq!(s.pac.kind, PacKind::Sandbox);
    assert_eq!(s.pac.request_timeout, 7);
    assert_eq!(s.pac.connect_timeout, 10, "default");
    assert_eq!(s.pac.backup.as_ref().map(|b| b.kind), Some(PacKind::Finkok));
    // The name in the attempt log is the one written in the file.
    for kind in [PacKind::Sandbox, PacKind::Sw, PacKind::Finkok] {
        assert_eq!(
            toml::Value::try_from(kind).ok(),
            Some(toml::Value::String(kind.name().into()))
        );
    }
    // A misspelt key stops the load, named, instead of the first connection.
    assert_names_all(
        &refused("[pac]\nurll = \"https://x\"\n"),
        &["unknown field `urll`", "in `pac`"],
    );
    // A secret of the wrong type is not echoed.
    let err = refused("[pac]\npassword = 31415926\n");
    assert!(
        !err.contains("31415926") && err.contains("pac.password"),
        "{err}"
    );
    // An unknown kind is listed with the other problems, as a real PAC (it needs a CSD).
    let err = Settings::from_parts(Some("[pac]\nkind = \"acme\"\n"), &[])
        .expect_err("unknown kind")
        .to_string();
    assert!(
        err.contains("[pac] kind = \"acme\": expected \"sandbox\", \"sw\" or \"finkok\"")
            && err.contains(
                "[emisor] csd_cer, csd_key and csd_password are required with [pac] kind = \"acme\""
            ),
        "{err}"
    );
}

#[test]
fn worker_keys_are_typed_and_checked_at_load() {
    let s = Settings::defaults().expect("defaults");
    assert_eq!(
        (
            s.worker.lease_seconds,
            s.worker.idle_poll_ms,
            s.worker.max_attempts
        ),
        (30, 500, 10)
    );
    assert_names_all(
        &refused("[worker]\nlease_secs = 5\n"),
        &["unknown field `lease_secs`", "lease_seconds"],
    );
    assert_names_all(
        &refused(
            "[worker]\nconcurrency = 2000\nlease_seconds = 1\nidle_poll_ms = 9\nmax_attempts = 3000000000\n",
        ),
        &[
            "[worker] concurrency must be 1 to 1024, not 2000",
            "[worker] lease_seconds = 1 is too small",
            "[worker] idle_poll_ms = 9 is too small",
            "[worker] max_attempts is too large",
        ],
    );
    assert_names_all(
        &refused("[worker]\nwindow_hours = -1\n"),
        &["worker.window_hours"],
    );
    // With a default to type it by, an environment override is an integer.
    let s = Settings::from_parts(None, &env(&[("AUTOFACTURA__WORKER__LEASE_SECONDS", "5")]))
        .expect("settings");
    assert_eq!(s.worker.lease_seconds, 5);
}

#[test]
fn admin_keys_are_typed_and_checked_at_load() {
    let s = Settings::defaults().expect("defaults");
    assert_eq!(
        (
            s.admin.secure_cookies,
            s.admin.session_hours,
            s.admin.reconcile_interval_seconds
        ),
        (false, 12, 3600)
    );
    // Numbers and the flag written as strings are still read, as before.
    let s = Settings::from_parts(
        Some("[admin]\nsession_hours = \"2\"\nreconcile_interval_seconds = 0\nsecure_cookies = \"true\"\n"),
        &[],
    )
    .expect("settings");
    assert_eq!(
        (s.admin.session_hours, s.admin.reconcile_interval_seconds),
        (2, 0)
    );
    assert!(s.admin.secure_cookies);
    let s = Settings::from_parts(
        None,
        &env(&[
            ("AUTOFACTURA__ADMIN__SESSION_HOURS", "3"),
            ("AUTOFACTURA__ADMIN__SECURE_COOKIES", "true"),
        ]),
    )
    .expect("settings");
    assert_eq!(s.admin.session_hours, 3);
    assert!(s.admin.secure_cookies);
    for (file, needle) in [
        ("[admin]\nsession_hours = -1\n", "expected a whole number"),
        (
            "[admin]\nsession_hours = \"soon\"\n",
            "expected a whole number",
        ),
        ("[admin]\nsecure_cookies = 1\n", "expected true or false"),
        ("[admin]\npasword = \"x\"\n", "unknown field `pasword`"),
    ] {
        assert_names_all(&refused(file), &[needle]);
    }
}

#[test]
fn global_keys_are_typed_and_checked_at_load() {
    use crate::domain::period::Periodicidad;
    let s = Settings::defaults().expect("defaults");
    assert_eq!(s.global.periodicidad, Periodicidad::Mensual);
    assert_eq!(
        (s.global.serie.as_str(), s.global.max_conceptos),
        ("G", 1000)
    );
    let s = Settings::from_parts(Some("[global]\nperiodicidad = \"quincenal\"\n"), &[])
        .expect("quincenal");
    assert_eq!(s.global.periodicidad, Periodicidad::Quincenal);
    let err = refused("[global]\nperiodicidad = \"anual\"\n");
    assert_names_all(&err, &["global.periodicidad", "mensual"]);
    let err =
        refused("[global]\nperiodicidad = \"bimestral\"\nserie = \"G-1\"\nmax_conceptos = 0\n");
    assert_names_all(
        &err,
        &[
            "[global] periodicidad = \"bimestral\" is only for régimen 621",
            "[global] serie",
            "[global] max_conceptos = 0",
        ],
    );
    let rif = "[emisor]\nregimen_fiscal = \"621\"\n[global]\nperiodicidad = \"bimestral\"\n";
    assert_eq!(
        Settings::from_parts(Some(rif), &[])
            .expect("RIF may use bimestral")
            .global
            .periodicidad,
        Periodicidad::Bimestral
    );
}

#[test]
fn each_pac_connection_knows_its_environment() {
    use super::PacEnvironment::{Production, Test};
    let csd =
        "[emisor]\ncsd_cer = \"Cargo.toml\"\ncsd_key = \"Cargo.toml\"\ncsd_password = \"x\"\n";
    let env = |pac: &str| {
        Settings::from_parts(Some(&format!("[pac]\n{pac}{csd}")), &[]).map(|s| s.pac_environment())
    };
    assert_eq!(
        Settings::defaults().expect("defaults").pac_environment(),
        Test
    );
    let known = [
        ("sw", "https://services.test.sw.com.mx", Test),
        ("sw", "https://services.sw.com.mx/", Production),
        ("finkok", "https://demo-facturacion.finkok.com", Test),
        ("finkok", "https://facturacion.finkok.com", Production),
    ];
    for (kind, url, want) in known {
        let got = env(&format!("kind = \"{kind}\"\nurl = \"{url}\"\n")).expect(url);
        assert_eq!(got, want, "{url}");
    }
    // Elsewhere it must be said, and it may not contradict a known URL.
    let other = "kind = \"sw\"\nurl = \"https://pac.example.mx\"\n";
    assert_names_all(
        &refused(&format!("[pac]\n{other}{csd}")),
        &[
            "[pac] environment = \"test\" or \"production\" is required",
            "pac.example.mx",
        ],
    );
    assert_eq!(
        env(&format!("{other}environment = \"production\"\n")).expect("set"),
        Production
    );
    assert_names_all(
        &refused(&format!(
            "[pac]\nkind = \"sw\"\nurl = \"https://services.sw.com.mx\"\nenvironment = \"test\"\n{csd}"
        )),
        &["[pac] environment = \"test\" but", "production service"],
    );
    assert_names_all(
        &refused(&format!(
            "[pac]\nkind = \"sw\"\nurl = \"https://services.sw.com.mx\"\n[pac.backup]\nkind = \"finkok\"\nurl = \"https://demo-facturacion.finkok.com\"\n{csd}"
        )),
        &["[pac.backup] is a test environment but [pac] is a production one"],
    );
    // Emisor and [fx] are checked at load too.
    assert_names_all(
        &refused("[emisor]\nlugar_expedicion = \"17000\"\n"),
        &["lugar_expedicion = \"17000\" is not in c_CodigoPostal"],
    );
    assert_names_all(
        &refused("[fx]\nsource = \"banxico\"\n"),
        &["[fx] source = \"banxico\" needs token"],
    );
    assert_names_all(
        &refused("[fx]\nsource = \"fixed\"\nrates = { USD = \"17.1234567\", ZZZ = \"1\" }\n"),
        &["rates.USD", "\"ZZZ\" is not a c_Moneda currency"],
    );
}

#[test]
fn email_is_off_without_smtp_url_and_checked_when_on() {
    let s = Settings::defaults().expect("defaults");
    assert!(!s.email.enabled());
    assert_eq!(s.email.message_domain(), None);
    let on = "[email]\nsmtp_url = \"smtps://u:p@smtp.example.mx:465\"\nfrom = \"Facturas <facturas@example.mx>\"\n";
    let s = Settings::from_parts(Some(on), &[]).expect("email on");
    assert!(s.email.enabled());
    assert_eq!(s.email.message_domain().as_deref(), Some("example.mx"));
    let err = refused(
        "[email]\nsmtp_url = \"http://u:hunter2@smtp.example.mx\"\nbcc = \"no address\"\ntimeout_seconds = 0\n",
    );
    assert_names_all(
        &err,
        &[
            "[email] smtp_url",
            "smtp:// or smtps://",
            "needs from",
            "[email] bcc",
            "[email] timeout_seconds",
        ],
    );
    assert!(
        !err.contains("hunter2"),
        "the password is never quoted: {err}"
    );
}

#[test]
fn an_otlp_endpoint_needs_the_otel_feature_and_a_url() {
    let why = refused("[log]\notlp_endpoint = \"collector:4318\"\n");
    if cfg!(feature = "otel") {
        assert_names_all(&why, &["[log] otlp_endpoint", "http(s)://"]);
        let ok = Settings::from_parts(
            Some("[log]\notlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"\n"),
            &[],
        )
        .expect("a traces URL");
        assert_eq!(
            ok.log.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
    } else {
        assert_names_all(&why, &["[log] otlp_endpoint", "--features otel"]);
    }
}
