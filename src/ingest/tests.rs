//! Unit tests of the ingestor: receptors, currencies, environments, Fecha.

use chrono::TimeZone;

use crate::domain::PaymentStatus;

use super::*;

fn facts(customer: CustomerData) -> PaymentFacts {
    PaymentFacts {
        provider: "stripe",
        payment_id: "pi_1".into(),
        event_id: "evt_1".into(),
        amount: Decimal::new(11600, 2),
        currency: "MXN".into(),
        method: Method::Card(Some("debit".into())),
        paid_at: Utc
            .with_ymd_and_hms(2026, 1, 15, 3, 30, 0)
            .single()
            .expect("time"),
        livemode: true,
        customer,
        description: Some("Plan | Pro".into()),
        references: Vec::new(),
        lines: Vec::new(),
        provider_rate: None,
    }
}

fn full_customer() -> CustomerData {
    CustomerData {
        rfc: Some("XIQB891116QE4".into()),
        nombre: Some("Berenice Ximo Quezada".into()),
        regimen_fiscal: Some("612".into()),
        codigo_postal: Some("26015".into()),
        uso_cfdi: None,
        email: None,
        identification: None,
    }
}

#[test]
fn a_complete_payment_freezes_a_request_with_fecha_in_mexico_city() {
    let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    let (p, d) = ing.plan(&facts(full_customer()));
    assert_eq!(p.status, PaymentStatus::InvoicePending);
    let d = d.expect("draft");
    assert_eq!(
        d.request.fecha.to_string(),
        "2026-01-14 21:30:00",
        "UTC−6 in January"
    );
    assert_eq!(d.request.forma_pago, "28");
    assert_eq!(d.request.lines[0].descripcion, "Plan   Pro");
    assert_eq!(d.stamp_key, StampKey::derive("stripe", "pi_1", "ingreso"));
    assert_eq!(d.state, DocumentState::Pending);
    match &d.request.receptor {
        ReceptorData::Nominativo {
            uso_cfdi, nombre, ..
        } => {
            assert_eq!(uso_cfdi, "G03");
            assert_eq!(nombre, "BERENICE XIMO QUEZADA");
        }
        other => panic!("unexpected receptor {other:?}"),
    }
}

#[test]
fn no_rfc_or_the_generic_rfc_waits_for_the_factura_global() {
    let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    let (p, d) = ing.plan(&facts(CustomerData::default()));
    assert_eq!(
        (p.status, d.is_none()),
        (PaymentStatus::AwaitingGlobal, true)
    );
    let generic = CustomerData {
        rfc: Some("XAXX010101000".into()),
        ..CustomerData::default()
    };
    assert_eq!(
        ing.plan(&facts(generic)).0.status,
        PaymentStatus::AwaitingGlobal
    );
}

#[test]
fn incomplete_or_invalid_receptor_data_needs_attention_with_a_reason() {
    let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    let partial = CustomerData {
        rfc: Some("XIQB891116QE4".into()),
        ..CustomerData::default()
    };
    let (p, d) = ing.plan(&facts(partial));
    assert!(d.is_none());
    assert_eq!(p.status, PaymentStatus::NeedsAttention);
    assert!(
        p.reason.as_deref().unwrap_or("").contains("régimen fiscal"),
        "{:?}",
        p.reason
    );
    let bad = CustomerData {
        rfc: Some("NOPE".into()),
        ..full_customer()
    };
    assert!(
        ing.plan(&facts(bad))
            .0
            .reason
            .unwrap_or_default()
            .contains("not a valid RFC")
    );
}

#[test]
fn checkout_custom_fields_fill_the_customer_data_before_anything_else() {
    let fields = serde_json::json!([
        { "key": "regimenfiscal", "type": "dropdown",
          "dropdown": { "value": "612", "options": [{ "label": "612 - …", "value": "612" }] } },
        { "key": "uso_cfdi", "type": "dropdown", "dropdown": { "value": "G03", "options": [] } },
        { "key": "RazonSocial", "type": "text", "text": { "value": " Berenice Ximo Quezada " } },
        { "key": "codigo-postal", "type": "numeric", "numeric": { "value": "26015" } },
        { "key": "rfc", "type": "text", "text": { "value": null } },
        { "key": "engraving", "type": "text", "text": { "value": "ignored" } }
    ]);
    let mut c = CustomerData {
        uso_cfdi: Some("S01".into()),
        ..CustomerData::default()
    };
    c.fill_from_custom_fields(Some(&fields));
    assert_eq!(
        c,
        CustomerData {
            rfc: None,
            nombre: Some("Berenice Ximo Quezada".into()),
            regimen_fiscal: Some("612".into()),
            codigo_postal: Some("26015".into()),
            uso_cfdi: Some("S01".into()),
            email: None,
            identification: None,
        },
        "an unanswered field stays empty, a value already there is kept"
    );
}

#[test]
fn data_breaking_a_catalog_rule_sends_the_customer_to_the_portal() {
    let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    // 601 is a persona moral's régimen; XIQB891116QE4 is a persona física.
    let wrong = CustomerData {
        regimen_fiscal: Some("601".into()),
        ..full_customer()
    };
    let (p, d) = ing.plan(&facts(wrong));
    assert!(d.is_none());
    let reason = p.reason.unwrap_or_default();
    assert_eq!(p.status, PaymentStatus::NeedsAttention);
    assert!(
        reason.contains("régimen fiscal 601 does not apply to a persona física"),
        "{reason}"
    );
    assert!(reason.contains("self-invoice at /facturar"), "{reason}");
    let off = Settings::from_parts(Some("[portal]\nenabled = false\n"), &[]).expect("settings");
    let ing = Ingestor::new(&off).expect("ingestor");
    let unknown_cp = CustomerData {
        codigo_postal: Some("17000".into()),
        ..full_customer()
    };
    let reason = ing.plan(&facts(unknown_cp)).0.reason.unwrap_or_default();
    assert!(
        reason.contains("17000 is not in c_CodigoPostal"),
        "{reason}"
    );
    assert!(reason.contains("portal is off"), "{reason}");
}

#[test]
fn a_foreign_currency_is_invoiced_in_it_with_the_rate_or_held_without_one() {
    let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    let usd = PaymentFacts {
        currency: "USD".into(),
        amount: Decimal::new(2999, 2),
        provider_rate: Some("17.4512349".parse().expect("rate")),
        ..facts(full_customer())
    };
    let (p, d) = ing.plan(&usd);
    assert_eq!(p.status, PaymentStatus::InvoicePending, "{:?}", p.reason);
    let d = d.expect("draft");
    assert_eq!(d.request.moneda, "USD");
    assert_eq!(
        d.request.tipo_cambio.map(|t| t.to_string()).as_deref(),
        Some("17.451235"),
        "at most the 6 decimals of the XSD"
    );
    let (p, d) = ing.plan(&PaymentFacts {
        provider_rate: None,
        ..usd.clone()
    });
    assert!(d.is_none());
    assert_eq!(p.status, PaymentStatus::NeedsAttention);
    assert!(
        p.reason
            .as_deref()
            .unwrap_or_default()
            .contains("no exchange rate for currency USD"),
        "{:?}",
        p.reason
    );
    // Zero decimals in c_Moneda: a JPY amount with centavos cannot be invoiced.
    let (p, _) = ing.plan_rated(
        &PaymentFacts {
            currency: "JPY".into(),
            amount: Decimal::new(150050, 2),
            ..usd.clone()
        },
        Some(Ok(Decimal::new(12, 2))),
    );
    assert_eq!(p.status, PaymentStatus::NeedsAttention, "{:?}", p.reason);
    let (p, d) = ing.plan_rated(
        &PaymentFacts {
            currency: "JPY".into(),
            amount: Decimal::new(1500, 0),
            ..usd.clone()
        },
        Some(Ok(Decimal::new(12, 2))),
    );
    assert_eq!(p.status, PaymentStatus::InvoicePending, "{:?}", p.reason);
    assert_eq!(d.expect("draft").request.moneda, "JPY");
    // A restricted list still refuses the others.
    let only_mxn =
        Settings::from_parts(Some("[invoice]\ncurrencies = [\"MXN\"]\n"), &[]).expect("settings");
    let (p, _) = Ingestor::new(&only_mxn).expect("ingestor").plan(&usd);
    assert!(
        p.reason
            .unwrap_or_default()
            .contains("currency USD is not invoiced")
    );
}

#[test]
fn test_and_live_payments_go_only_to_their_environment() {
    let at = |env: &str| {
        let file = format!(
            "[pac]\nkind = \"sw\"\nurl = \"http://127.0.0.1:9\"\nenvironment = \"{env}\"\n[emisor]\ncsd_cer = \"Cargo.toml\"\ncsd_key = \"Cargo.toml\"\ncsd_password = \"x\"\n"
        );
        Ingestor::new(&Settings::from_parts(Some(&file), &[]).expect("settings")).expect("ingestor")
    };
    let test_mode = PaymentFacts {
        livemode: false,
        ..facts(full_customer())
    };
    let live = facts(full_customer());
    let state = |ing: &Ingestor, f: &PaymentFacts| {
        let d = ing.plan(f).1.expect("draft");
        (d.state, d.error_code)
    };
    assert_eq!(
        state(&at("test"), &test_mode),
        (DocumentState::Pending, None)
    );
    assert_eq!(
        state(&at("test"), &live),
        (
            DocumentState::NeedsAttention,
            Some("live_to_test_pac".into())
        )
    );
    assert_eq!(
        state(&at("production"), &live),
        (DocumentState::Pending, None)
    );
    assert_eq!(
        state(&at("production"), &test_mode),
        (DocumentState::NeedsAttention, Some("test_mode".into()))
    );
    let sandbox = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
    assert_eq!(state(&sandbox, &test_mode), (DocumentState::Pending, None));
    assert_eq!(state(&sandbox, &live), (DocumentState::Pending, None));
}

#[test]
fn fecha_is_local_time_at_the_lugar_de_expedicion() {
    let tijuana = Settings::from_parts(Some("[emisor]\nlugar_expedicion = \"22000\"\n"), &[])
        .expect("settings");
    let ing = Ingestor::new(&tijuana).expect("ingestor");
    let at = |s: &str| {
        let f = PaymentFacts {
            paid_at: DateTime::parse_from_rfc3339(s)
                .expect("time")
                .with_timezone(&Utc),
            ..facts(full_customer())
        };
        ing.plan(&f).1.expect("draft").request.fecha.to_string()
    };
    // PDT (UTC−7) until 2026-11-01 09:00 UTC, PST (UTC−8) after; Mexico City is UTC−6.
    assert_eq!(at("2026-11-01T08:59:59Z"), "2026-11-01 01:59:59");
    assert_eq!(at("2026-11-01T09:00:00Z"), "2026-11-01 01:00:00");
    assert_eq!(at("2026-07-15T18:00:00Z"), "2026-07-15 11:00:00");
    assert_eq!(at("2026-12-15T18:00:00Z"), "2026-12-15 10:00:00");
}

#[test]
fn forma_pago_follows_the_configured_table() {
    let t = Settings::defaults().expect("settings").forma_pago;
    assert_eq!(Method::Card(Some("credit".into())).forma_pago(&t), "04");
    assert_eq!(Method::Card(None).forma_pago(&t), "04");
    assert_eq!(Method::Oxxo.forma_pago(&t), "01");
    assert_eq!(Method::Spei.forma_pago(&t), "03");
    let mp = |ty: &str| {
        Method::MercadoPago {
            payment_type: ty.into(),
            payment_method: "x".into(),
        }
        .forma_pago(&t)
    };
    assert_eq!(
        (
            mp("debit_card").as_str(),
            mp("account_money").as_str(),
            mp("new_thing").as_str()
        ),
        ("28", "06", "99")
    );
}

#[test]
fn minor_units_use_the_currency_decimals() {
    assert_eq!(from_minor_units(11600, "MXN"), Some(Decimal::new(11600, 2)));
    assert_eq!(from_minor_units(1, "ZZZ"), None);
}
