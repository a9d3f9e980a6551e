//! Property tests: any generated invoice request either yields a document that passes the
//! validator with reconciled totals, or a clear error.

use autofactura::cfdi::dom::Element;
use autofactura::cfdi::validate::check_amounts;
use autofactura::cfdi::{
    self, CfdiError, EmisorData, InvoiceRequest, LineData, ReceptorData, RetencionData, Rfc,
    TaxTreatment, TipoComprobante,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

fn dec(mantissa: i64, scale: u32) -> Decimal {
    Decimal::new(mantissa, scale)
}

/// A line's tax treatment, IVA 16 % most often (refund_props draws from it too).
pub(crate) fn tax() -> impl Strategy<Value = TaxTreatment> {
    prop_oneof![
        4 => Just(TaxTreatment::Iva16),
        1 => Just(TaxTreatment::Iva8),
        1 => Just(TaxTreatment::Iva0),
        1 => Just(TaxTreatment::Exento),
        1 => Just(TaxTreatment::NoObjeto),
    ]
}

fn line() -> impl Strategy<Value = LineData> {
    (
        // Cantidad: mostly whole units, sometimes fractional with up to 6 decimals.
        prop_oneof![3 => (1i64..20).prop_map(|q| dec(q, 0)), 1 => (1i64..50_000_000).prop_map(|q| dec(q, 6))],
        // Unit price with 0 to 6 decimals, up to 100,000.
        (0i64..10_000_000, 0u32..=6).prop_map(|(m, s)| dec(m, s.min(6)) ),
        prop::option::weighted(0.3, (0i64..5_000, 0u32..=2).prop_map(|(m, s)| dec(m, s))),
        tax(),
        prop::option::weighted(0.15, prop_oneof![Just("0.106667"), Just("0.100000"), Just("0.040000")]),
        "[a-zA-Z0-9 &<>\"'ñÑáé]{1,60}",
    )
        .prop_map(|(cantidad, unit_price, discount, tax, ret, descripcion)| LineData {
            clave_prod_serv: "01010101".into(),
            no_identificacion: None,
            cantidad,
            clave_unidad: "ACT".into(),
            unidad: None,
            descripcion: if descripcion.trim().is_empty() { "x".into() } else { descripcion },
            unit_price,
            discount,
            tax,
            tax_amount: None,
            retenciones: match (ret, tax) {
                (Some(t), TaxTreatment::Iva16 | TaxTreatment::Iva8) => {
                    vec![RetencionData { impuesto: "002".into(), tasa: t.parse().expect("rate"), importe: None }]
                }
                _ => vec![],
            },
        })
}

fn request() -> impl Strategy<Value = InvoiceRequest> {
    (
        prop::collection::vec(line(), 1..8),
        any::<bool>(),
        prop_oneof![4 => Just(("MXN", None)), 1 => Just(("USD", Some("17.2345"))), 1 => Just(("JPY", Some("0.1234"))), 1 => Just(("BHD", Some("45.1")))],
    )
        .prop_map(|(lines, prices_include_tax, (moneda, tc))| {
            ingreso(lines, prices_include_tax, moneda, tc.map(|t| t.parse().expect("tc")))
        })
}

/// An ingreso of the SAT's test emisor to a nominative receptor with `lines`, dated
/// 2026-11-30 (refund_props sells with it too).
pub(crate) fn ingreso(
    lines: Vec<LineData>,
    prices_include_tax: bool,
    moneda: &str,
    tipo_cambio: Option<Decimal>,
) -> InvoiceRequest {
    InvoiceRequest {
        tipo: TipoComprobante::Ingreso,
        serie: Some("A".into()),
        folio: Some("1".into()),
        fecha: chrono::NaiveDate::from_ymd_opt(2026, 11, 30)
            .and_then(|d| d.and_hms_opt(10, 0, 0))
            .expect("date"),
        moneda: moneda.into(),
        tipo_cambio,
        forma_pago: "04".into(),
        metodo_pago: "PUE".into(),
        condiciones_de_pago: None,
        exportacion: "01".into(),
        prices_include_tax,
        emisor: EmisorData {
            rfc: Rfc::parse("EKU9003173C9").expect("rfc"),
            nombre: "ESCUELA KEMPER URGATE".into(),
            regimen_fiscal: "601".into(),
            lugar_expedicion: "42501".into(),
        },
        receptor: ReceptorData::Nominativo {
            rfc: Rfc::parse("URE180429TM6").expect("rfc"),
            nombre: "UNIVERSIDAD ROBOTICA ESPAÑOLA".into(),
            domicilio_fiscal: "86991".into(),
            regimen_fiscal: "601".into(),
            uso_cfdi: "G03".into(),
        },
        informacion_global: None,
        relacionados: vec![],
        lines,
        pago: None,
    }
}

fn attr(root: &Element, name: &str) -> Decimal {
    root.attr(name)
        .map_or(Decimal::ZERO, |v| v.parse().expect("amount"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_request_yields_a_valid_document_or_a_clear_error(req in request()) {
        match cfdi::build(&req, "30001000000500003416") {
            Ok(c) => {
                let xml = cfdi::xml::to_xml(&c);
                let root = Element::parse(&xml).expect("our XML parses");
                let problems = check_amounts(&root);
                prop_assert!(problems.is_empty(), "validator rejects our document: {problems:?}\n{}", String::from_utf8_lossy(&xml));
                // Totals reconcile with the attributes actually written.
                let imp = root.child(cfdi::dom::NS_CFDI, "Impuestos");
                let tras = imp.map_or(Decimal::ZERO, |i| attr(i, "TotalImpuestosTrasladados"));
                let ret = imp.map_or(Decimal::ZERO, |i| attr(i, "TotalImpuestosRetenidos"));
                prop_assert_eq!(attr(&root, "Total"), attr(&root, "SubTotal") - attr(&root, "Descuento") + tras - ret);
                // Tax-included prices add back to what was charged, within a cent per rounding step.
                if req.prices_include_tax && req.lines.iter().all(|l| l.retenciones.is_empty()) {
                    let d = c.moneda_decimals;
                    let charged: Decimal = req.lines.iter().map(|l| l.cantidad * l.unit_price - l.discount.unwrap_or_default()).sum();
                    let diff = (attr(&root, "Total") - cfdi::money::round(charged, d)).abs();
                    prop_assert!(diff <= Decimal::new(2, d), "Total {} vs charged {charged}", attr(&root, "Total"));
                }
            }
            Err(CfdiError::Request(msg)) => {
                prop_assert!(msg.len() > 10, "unclear error: {msg}");
            }
            Err(other) => prop_assert!(false, "unexpected error kind: {other}"),
        }
    }

    #[test]
    fn a_single_tax_included_line_reconciles_to_the_centavo(cents in 1i64..100_000_000) {
        let mut req = request_with_one_line(dec(cents, 2));
        req.prices_include_tax = true;
        let c = cfdi::build(&req, "30001000000500003416").expect("builds");
        let root = Element::parse(&cfdi::xml::to_xml(&c)).expect("parses");
        prop_assert!(check_amounts(&root).is_empty());
        let diff = (attr(&root, "Total") - dec(cents, 2)).abs();
        // Exact, except when the Base lands exactly on half a centavo (both halves round up).
        prop_assert!(diff <= dec(1, 2), "Total {} for a price of {}", attr(&root, "Total"), dec(cents, 2));
    }
}

fn request_with_one_line(price: Decimal) -> InvoiceRequest {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut req = request().new_tree(&mut runner).expect("tree").current();
    req.moneda = "MXN".into();
    req.tipo_cambio = None;
    req.lines.truncate(1);
    let l = &mut req.lines[0];
    l.cantidad = Decimal::ONE;
    l.unit_price = price;
    l.discount = None;
    l.tax = TaxTreatment::Iva16;
    l.retenciones.clear();
    req
}

/// A request whose one line (or whose exchange rate) is set by `f`.
fn request_with(f: impl FnOnce(&mut InvoiceRequest)) -> InvoiceRequest {
    let mut req = request_with_one_line(dec(49900, 2));
    f(&mut req);
    req
}

/// The error message of a build that must be refused.
fn refused(req: &InvoiceRequest) -> String {
    match cfdi::build(req, "30001000000500003416") {
        Err(CfdiError::Request(msg)) => msg,
        Err(other) => panic!("unexpected error kind: {other}"),
        Ok(c) => panic!(
            "built a document with SubTotal {} and Total {}",
            c.subtotal, c.total
        ),
    }
}

/// Amounts beyond the CFDI limits (14 integer digits, 6 decimals) are errors naming the
/// attribute, never a `Decimal` overflow panic, wherever the overflow would happen: the line
/// product, the tax, the sums, a tax-included split.
#[test]
fn amounts_beyond_the_cfdi_limits_are_errors_not_panics() {
    let max = Decimal::MAX;
    let e14 = Decimal::from(100_000_000_000_000i64);
    let cases: Vec<(&str, InvoiceRequest)> = vec![
        ("Cantidad", request_with(|r| r.lines[0].cantidad = max)),
        ("unit price", request_with(|r| r.lines[0].unit_price = max)),
        (
            "unit price",
            request_with(|r| {
                r.prices_include_tax = true;
                r.lines[0].unit_price = max;
            }),
        ),
        (
            "discount",
            request_with(|r| r.lines[0].discount = Some(max)),
        ),
        (
            "TipoCambio",
            request_with(|r| {
                r.moneda = "USD".into();
                r.tipo_cambio = Some(max);
            }),
        ),
        ("Cantidad", request_with(|r| r.lines[0].cantidad = e14)),
        // Each factor within the limit, the product not.
        (
            "Importe",
            request_with(|r| {
                r.lines[0].cantidad = dec(10_000_000_000_000, 0);
                r.lines[0].unit_price = dec(10_000_000_000_000, 0);
            }),
        ),
        // Each line within the limit, the sum not.
        (
            "SubTotal",
            request_with(|r| {
                r.lines[0].unit_price = dec(90_000_000_000_000, 0);
                r.lines.push(r.lines[0].clone());
            }),
        ),
        // The line within the limit, its sum rounded to the currency's decimals not.
        (
            "SubTotal",
            request_with(|r| {
                r.lines[0].unit_price = "99999999999999.999".parse().expect("price");
                r.lines[0].tax = TaxTreatment::NoObjeto;
            }),
        ),
        // The same with a discount, which brings the Total back within the limit.
        (
            "SubTotal",
            request_with(|r| {
                r.lines[0].unit_price = "99999999999999.999".parse().expect("price");
                r.lines[0].discount = Some(Decimal::ONE);
                r.lines[0].tax = TaxTreatment::Exento;
            }),
        ),
        // The SubTotal within the limit, the Total (with IVA) not.
        (
            "Total",
            request_with(|r| r.lines[0].unit_price = dec(90_000_000_000_000, 0)),
        ),
    ];
    for (field, req) in cases {
        let msg = refused(&req);
        assert!(
            msg.contains(field) && msg.contains("14 integer digits"),
            "{field}: {msg}"
        );
    }
    // A price whose Total with IVA is the largest allowed, 99999999999999.99, still builds,
    // and the validator accepts the document.
    let req = request_with(|r| r.lines[0].unit_price = dec(8_620_689_655_172_413, 2));
    let c = cfdi::build(&req, "30001000000500003416").expect("the largest price builds");
    let root = Element::parse(&cfdi::xml::to_xml(&c)).expect("parses");
    assert!(
        check_amounts(&root).is_empty(),
        "{:?}",
        check_amounts(&root)
    );
    assert_eq!(c.total, dec(9_999_999_999_999_999, 2));
}

/// Any `Decimal`, up to its largest, from its 96-bit mantissa and scale.
fn any_decimal() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
            0u32..=28
        )
            .prop_map(|(lo, mid, hi, neg, scale)| Decimal::from_parts(lo, mid, hi, neg, scale)),
        (0i64..i64::MAX, 0u32..=8).prop_map(|(m, s)| dec(m, s)),
        Just(Decimal::MAX),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever the amounts, `build` returns: a document the validator accepts, or a clear error.
    #[test]
    fn any_amounts_are_built_or_refused_never_a_panic(
        cantidad in any_decimal(),
        price in any_decimal(),
        discount in prop::option::of(any_decimal()),
        tipo_cambio in any_decimal(),
        usd in any::<bool>(),
        include_tax in any::<bool>(),
        tax in tax(),
    ) {
        let mut req = request_with_one_line(price);
        let l = &mut req.lines[0];
        l.cantidad = cantidad;
        l.discount = discount;
        l.tax = tax;
        req.prices_include_tax = include_tax;
        if usd {
            req.moneda = "USD".into();
            req.tipo_cambio = Some(tipo_cambio);
        }
        match cfdi::build(&req, "30001000000500003416") {
            Ok(c) => {
                let root = Element::parse(&cfdi::xml::to_xml(&c)).expect("our XML parses");
                let problems = check_amounts(&root);
                prop_assert!(problems.is_empty(), "validator rejects our document: {problems:?}");
            }
            Err(CfdiError::Request(msg)) => prop_assert!(msg.len() > 10, "unclear error: {msg}"),
            Err(other) => prop_assert!(false, "unexpected error kind: {other}"),
        }
    }
}

/// A sale's currency: its code, c_Moneda decimals, and the provider's rate (within the
/// sandbox's published one): two, zero and three decimals.
type Currency = (&'static str, u32, &'static str);

/// A random basket as a provider describes it (minor units of a random currency): lines with
/// quantities and line discounts, an order discount left to prorate, maybe shipping; each line
/// taxed at 16, 8 or 0 %. Prices are tax-included (as Stripe Checkout charges by default) or
/// tax-excluded, and the tax of each line is Stripe Tax's (rounded per line to the currency's
/// unit, what the customer paid) or, for tax-included prices only, left to the engine.
fn basket() -> impl Strategy<Value = (Vec<autofactura::basket::SaleLine>, i64, Currency)> {
    let item = (
        1i64..5,
        1i64..500_000,
        0i64..100,
        prop_oneof![Just(16), Just(8), Just(0)],
    );
    let pricing = prop_oneof![Just((true, false)), Just((true, true)), Just((false, true))];
    let currency = prop_oneof![
        3 => Just(("MXN", 2, "1")),
        1 => Just(("USD", 2, "17.75")),
        1 => Just(("JPY", 0, "0.1250")),
        1 => Just(("BHD", 3, "47.1")),
    ];
    (
        prop::collection::vec(item, 1..8),
        0i64..100,
        0i64..30_000,
        pricing,
        currency,
    )
        .prop_map(
            |(items, order_pct, shipping, (inclusive, stripe_tax), currency)| {
                let dp = currency.1;
                use autofactura::basket::{SaleLine, prorate_discount};
                let mut lines: Vec<SaleLine> = items
                    .iter()
                    .enumerate()
                    .map(|(i, (q, unit, pct, rate))| SaleLine {
                        description: format!("Producto {i}"),
                        quantity: Decimal::from(*q),
                        amount: dec(q * unit, dp),
                        discount: dec(q * unit * pct / 200, dp),
                        tax_percent: Some(Decimal::from(*rate)),
                        tax_inclusive: Some(inclusive),
                        ..SaleLine::default()
                    })
                    .collect();
                let net: i64 = items
                    .iter()
                    .map(|(q, u, pct, _)| q * u - q * u * pct / 200)
                    .sum();
                let order = net * order_pct / 200;
                if order > 0 {
                    prorate_discount(&mut lines, dec(order, dp), dp).expect("prorate");
                }
                if shipping > 0 {
                    lines.push(SaleLine {
                        quantity: Decimal::ONE,
                        amount: dec(shipping, dp),
                        // Taxed at the configured 16 % when tax-included; Stripe Tax's 16 % else.
                        tax_percent: (!inclusive).then(|| Decimal::from(16)),
                        shipping: true,
                        ..SaleLine::default()
                    });
                }
                // Stripe Tax: each line's tax on what it costs after discounts, to the currency's unit.
                let mut charged = 0;
                for l in &mut lines {
                    let cost = l.amount - l.discount;
                    let rate = l.tax_percent.unwrap_or(Decimal::from(16)) / Decimal::from(100);
                    let tax = if inclusive {
                        cost * rate / (Decimal::ONE + rate)
                    } else {
                        cost * rate
                    }
                    .round_dp(dp);
                    if stripe_tax {
                        l.tax_amount = Some(tax);
                    }
                    let paid = if inclusive { cost } else { cost + tax };
                    charged += (paid * Decimal::from(10i64.pow(dp)))
                        .to_i64()
                        .expect("minor units");
                }
                (lines, charged, currency)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any basket (mixed rates, discounts, shipping, prices with or without tax, Stripe Tax's
    /// amounts or none, in currencies of two, zero and three decimals) is frozen as a CFDI that totals exactly what was charged and that the
    /// sandbox accepts sealed: the engine's per-rate rounding never lands it a centavo off, so
    /// no sale is held for it.
    #[test]
    fn any_basket_is_frozen_for_exactly_what_was_charged((lines, charged, currency) in basket()) {
        let (moneda, dp, rate) = currency;
        use autofactura::ingest::{CustomerData, Ingestor, Method, PaymentFacts};
        let settings = autofactura::config::Settings::defaults().expect("settings");
        let ingestor = Ingestor::new(&settings).expect("ingestor");
        let facts = PaymentFacts {
            provider: "stripe",
            payment_id: "pi_basket".into(),
            event_id: "evt_basket".into(),
            amount: dec(charged, dp),
            currency: moneda.into(),
            method: Method::Card(Some("credit".into())),
            paid_at: chrono::Utc::now(),
            livemode: true,
            customer: CustomerData {
                rfc: Some("XIQB891116QE4".into()),
                nombre: Some("BERENICE XIMO QUEZADA".into()),
                regimen_fiscal: Some("612".into()),
                codigo_postal: Some("26015".into()),
                uso_cfdi: Some("G03".into()),
                email: None,
                identification: None,
            },
            description: None,
            references: Vec::new(),
            lines,
            provider_rate: (moneda != "MXN").then(|| rate.parse().expect("rate")),
        };
        let (payment, draft) = ingestor.plan(&facts);
        match draft {
            Some(d) => {
                let csd = autofactura::sandbox::csd().expect("test CSD");
                let sealed = cfdi::seal(&d.request, &csd).expect("seals").xml;
                let root = Element::parse(&sealed).expect("parses");
                prop_assert!(check_amounts(&root).is_empty());
                let sandbox = autofactura::pacsim::schema::check(&root);
                prop_assert!(sandbox.is_empty(), "the sandbox refuses: {sandbox:?}");
                prop_assert_eq!(attr(&root, "Total"), dec(charged, dp));
            }
            None => {
                let reason = payment.reason.unwrap_or_default();
                prop_assert!(false, "held ({}) instead of frozen: {reason}", payment.status);
            }
        }
    }
}

/// The REP of one payment of `doc` (built, Total `total`) at parcialidad `n` with `saldo` owed.
fn rep(doc: &cfdi::model::Comprobante, n: u32, saldo: Decimal, monto: Decimal) -> InvoiceRequest {
    let json = include_str!("../../fixtures/requests/13-pago-parcialidad-1.json");
    let mut req: InvoiceRequest = serde_json::from_str(json).expect("pago sample");
    let p = req.pago.as_mut().expect("pago");
    p.monto = monto;
    p.documento.num_parcialidad = n;
    p.documento.saldo_anterior = saldo;
    p.documento.total = doc.total;
    p.documento.traslados = cfdi::DocTraslado::of(doc);
    req
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any PPD invoice paid in any number of parcialidades: every REP passes the validator (what
    /// the sandbox PAC checks), the saldo reaches zero, and the parcialidades' TrasladosDR add
    /// up to the invoice's traslados: the Bases exactly, the tax to the centavo.
    #[test]
    fn parcialidades_carry_any_ppd_invoice_in_proportion(
        req in request(),
        cuts in prop::collection::vec(1u32..1000, 0..5),
    ) {
        let mut req = req;
        req.forma_pago = "99".into();
        req.metodo_pago = "PPD".into();
        req.moneda = "MXN".into();
        req.tipo_cambio = None;
        for l in &mut req.lines {
            l.retenciones.clear();
        }
        let Ok(doc) = cfdi::build(&req, "30001000000500003416") else {
            return Ok(());
        };
        prop_assume!(doc.total > Decimal::ZERO);
        // Payments: the Total cut at the given per-mille points, in whole centavos.
        let mut points: Vec<Decimal> = cuts
            .iter()
            .map(|c| (doc.total * Decimal::from(*c) / Decimal::from(1000)).round_dp(2))
            .filter(|p| *p > Decimal::ZERO && *p < doc.total)
            .collect();
        points.push(doc.total);
        points.sort();
        points.dedup();
        let mut saldo = doc.total;
        let mut paid_before = Decimal::ZERO;
        let mut sums: std::collections::BTreeMap<String, (Decimal, Decimal)> = Default::default();
        for (i, point) in points.iter().enumerate() {
            let monto = *point - paid_before;
            paid_before = *point;
            let n = u32::try_from(i + 1).expect("few");
            let c = cfdi::build(&rep(&doc, n, saldo, monto), "30001000000500003416")
                .map_err(|e| TestCaseError::fail(format!("REP {n}: {e}")))?;
            let xml = cfdi::xml::to_xml(&c);
            let root = Element::parse(&xml).expect("parse");
            let problems = check_amounts(&root);
            prop_assert!(problems.is_empty(), "REP {}: {:?}", n, problems);
            let d = &c.pagos.as_ref().expect("pagos").pago.docto;
            prop_assert_eq!(d.saldo_anterior - d.pagado, d.saldo_insoluto);
            saldo = d.saldo_insoluto;
            for t in &d.traslados {
                let e = sums.entry(format!("{} {:?}", t.tipo_factor, t.tasa)).or_default();
                e.0 += t.base;
                e.1 += t.importe.unwrap_or_default();
            }
        }
        prop_assert_eq!(saldo, Decimal::ZERO);
        for t in cfdi::DocTraslado::of(&doc) {
            let (base, imp) = sums.get(&format!("{} {:?}", t.tipo_factor, t.tasa)).copied().unwrap_or_default();
            prop_assert_eq!(base, t.base, "{:?}", t);
            let diff = (imp.round_dp(2) - t.importe.unwrap_or_default()).abs();
            prop_assert!(diff <= Decimal::new(1, 2), "{:?}: {} vs {:?}", t, imp, t.importe);
        }
    }
}
