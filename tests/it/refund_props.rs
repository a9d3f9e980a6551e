//! Property tests of refunds → egresos: for random sales (lines, discounts, IVA 16/8/0/exento,
//! not subject to tax, retenciones of IVA and ISR, prices with or without tax) and random
//! sequences of partial refunds that add up to the sale, every egreso passes the sandbox's checks
//! (XSD facets and catalogs, the amount rules, the Sello), each egreso's Total is exactly its
//! refund and together exactly the sale's, and their taxes add up, per impuesto and tasa, to
//! exactly the original's, unless the last egreso says it cannot (`Egreso::missed`) and no
//! centavo moved on any of its lines would stay within Anexo 20's tolerance: see
//! docs/refunds.md.

use autofactura::cfdi::dom::{Element, NS_CFDI};
use autofactura::cfdi::validate::{check_amounts, tax_in_tolerance};
use autofactura::cfdi::{self, InvoiceRequest, LineData, RetencionData, TaxTreatment};
use autofactura::refund::{Original, TaxGroup, TaxSums, egreso, taxes_of};
use proptest::prelude::*;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

use crate::cfdi_props::{ingreso, tax};

const UUID: &str = "5FB2822E-396D-4725-8521-CDC4BDD20CCF";

fn line() -> impl Strategy<Value = LineData> {
    (
        1i64..5,
        1i64..2_000_000,
        prop::option::weighted(0.3, 1i64..100),
        tax(),
        prop::option::weighted(
            0.3,
            prop_oneof![
                Just(&["002"][..]),
                Just(&["001"][..]),
                Just(&["002", "001"][..])
            ],
        ),
    )
        .prop_map(|(qty, cents, discount_pct, tax, withheld)| {
            let unit_price = Decimal::new(cents, 2);
            let gross = unit_price * Decimal::from(qty);
            LineData {
                clave_prod_serv: "01010101".into(),
                no_identificacion: None,
                cantidad: Decimal::from(qty),
                clave_unidad: "ACT".into(),
                unidad: None,
                descripcion: "Producto".into(),
                unit_price,
                // A whole-centavo discount below the line's amount.
                discount: discount_pct
                    .map(|p| cfdi::money::round(gross * Decimal::new(p, 2) / Decimal::TWO, 2))
                    .filter(|d| *d > Decimal::ZERO && *d < gross),
                tax,
                tax_amount: None,
                // Withheld by a business receptor from a service it pays (IVA 2/3 of 16 %,
                // ISR 10 %), on lines with IVA.
                retenciones: match (withheld, tax) {
                    (Some(w), TaxTreatment::Iva16 | TaxTreatment::Iva8) => w
                        .iter()
                        .map(|i| RetencionData {
                            impuesto: (*i).into(),
                            tasa: if *i == "002" {
                                Decimal::new(106_667, 6)
                            } else {
                                Decimal::new(1, 1)
                            },
                            importe: None,
                        })
                        .collect(),
                    _ => vec![],
                },
            }
        })
}

fn sale() -> impl Strategy<Value = InvoiceRequest> {
    (prop::collection::vec(line(), 1..5), any::<bool>())
        .prop_map(|(lines, included)| ingreso(lines, included, "MXN", None))
}

/// A document as the sandbox reads it: sealed with the SAT test CSD, parsed.
fn parsed(req: &InvoiceRequest) -> Element {
    static CSD: std::sync::OnceLock<cfdi::sello::Csd> = std::sync::OnceLock::new();
    let csd = CSD.get_or_init(|| autofactura::sandbox::csd().expect("test CSD"));
    let sealed = cfdi::seal(req, csd).expect("seals");
    Element::parse(&sealed.xml).expect("parses")
}

fn amount(e: &Element, name: &str) -> Decimal {
    e.attr(name)
        .map_or(Decimal::ZERO, |v| v.parse().expect("amount"))
}

/// The summary's taxes of a document per group: `T {impuesto} {tasa}` for a traslado with an
/// Importe, `R {impuesto}` for a retención.
fn taxes(root: &Element) -> BTreeMap<String, Decimal> {
    let mut out = BTreeMap::new();
    let Some(imp) = root.child(NS_CFDI, "Impuestos") else {
        return out;
    };
    for t in imp.path(NS_CFDI, &["Traslados", "Traslado"]) {
        if t.attr("Importe").is_some() {
            let tasa: Decimal = t.attr("TasaOCuota").expect("tasa").parse().expect("tasa");
            let key = format!(
                "T {} {}",
                t.attr("Impuesto").expect("impuesto"),
                tasa.normalize()
            );
            *out.entry(key).or_default() += amount(t, "Importe");
        }
    }
    for r in imp.path(NS_CFDI, &["Retenciones", "Retencion"]) {
        *out.entry(format!("R {}", r.attr("Impuesto").expect("impuesto")))
            .or_default() += amount(r, "Importe");
    }
    out
}

fn key(g: &TaxGroup) -> String {
    match g {
        TaxGroup::Traslado { impuesto, tasa } => format!("T {impuesto} {}", tasa.normalize()),
        TaxGroup::Retencion { impuesto } => format!("R {impuesto}"),
    }
}

/// Whether some line of `root` carrying a tax of group `k` could carry `step` more of it (its
/// Base moving the other way for a traslado, the same way for a retención, so the line credits
/// the same) with its Base positive and every tax of the line within Anexo 20's tolerance: a
/// closer amount the egreso should have taken.
fn a_line_could_move(root: &Element, k: &str, step: Decimal) -> bool {
    root.path(NS_CFDI, &["Conceptos", "Concepto"])
        .into_iter()
        .any(|c| {
            let tras = c.path(NS_CFDI, &["Impuestos", "Traslados", "Traslado"]);
            let ret = c.path(NS_CFDI, &["Impuestos", "Retenciones", "Retencion"]);
            let line: Vec<(String, bool, &Element)> = tras
                .iter()
                .filter(|t| t.attr("Importe").is_some())
                .map(|t| {
                    let tasa: Decimal = t.attr("TasaOCuota").expect("tasa").parse().expect("tasa");
                    (
                        format!(
                            "T {} {}",
                            t.attr("Impuesto").expect("imp"),
                            tasa.normalize()
                        ),
                        true,
                        *t,
                    )
                })
                .chain(
                    ret.iter()
                        .map(|r| (format!("R {}", r.attr("Impuesto").expect("imp")), false, *r)),
                )
                .collect();
            line.iter()
                .enumerate()
                .filter(|(_, (g, _, _))| g == k)
                .any(|(i, (_, traslado, _))| {
                    let base = amount(line[0].2, "Base") + if *traslado { -step } else { step };
                    base > Decimal::ZERO
                        && line.iter().enumerate().all(|(j, (_, _, e))| {
                            let importe =
                                amount(e, "Importe") + if i == j { step } else { Decimal::ZERO };
                            importe >= Decimal::ZERO
                                && tax_in_tolerance(base, 2, amount(e, "TasaOCuota"), importe, 2)
                        })
                })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(300), ..ProptestConfig::default() })]

    #[test]
    fn egresos_of_any_refund_sequence_pass_the_checks_and_credit_the_sale(
        req in sale(),
        cuts in prop::collection::vec(1u32..1000, 0..5),
    ) {
        let original = parsed(&req);
        let sale_total = amount(&original, "Total");
        let cents = (sale_total * Decimal::ONE_HUNDRED).trunc().to_string().parse::<i64>().expect("cents");
        // Refunds: the sale cut at random points, each at least a centavo; some followed by a
        // refund of one centavo, where rounding by largest remainder can shrink a line's share.
        let mut points: Vec<i64> = cuts
            .iter()
            .map(|c| i64::from(*c) * cents / 1000)
            .flat_map(|p| [p, p + i64::from(p % 3 == 0)])
            .filter(|p| *p > 0 && *p < cents)
            .collect();
        points.sort_unstable();
        points.dedup();
        points.push(cents);
        let mut before = 0i64;
        let (mut totals, mut credited) = (Decimal::ZERO, TaxSums::new());
        let mut sums: BTreeMap<String, Decimal> = BTreeMap::new();
        let mut last = None;
        for p in points {
            let o = Original {
                request: &req,
                uuid: UUID,
                lines: (0..req.lines.len()).collect(),
                sale_amount: sale_total,
                refunded_before: Decimal::new(before, 2),
                credited_taxes: credited.clone(),
            };
            let e = match egreso(&o, Decimal::new(p - before, 2), "NC", req.fecha) {
                Ok(e) => e,
                Err(err) => {
                    // Only a refund too small for any line may be refused; it is credited with the next.
                    prop_assert!(err.to_string().contains("less than one centavo"), "{err}");
                    continue;
                }
            };
            let mut request = e.request.clone();
            request.folio = Some("1".into());
            let root = parsed(&request);
            let structure = autofactura::pacsim::schema::check(&root);
            prop_assert!(structure.is_empty(), "sandbox schema: {structure:?}");
            let problems = check_amounts(&root);
            prop_assert!(problems.is_empty(), "sandbox amounts: {problems:?}");
            prop_assert_eq!(root.attr("TipoDeComprobante"), Some("E"));
            // Each line's share is cut with its taxes and split into Base and taxes on whole
            // centavos (refund::egreso), so each egreso credits exactly what was refunded.
            prop_assert_eq!(amount(&root, "Total"), Decimal::new(p - before, 2), "egreso Total for a refund");
            totals += amount(&root, "Total");
            for (k, v) in taxes(&root) {
                *sums.entry(k).or_default() += v;
            }
            for (g, v) in taxes_of(&e.request).expect("taxes") {
                *credited.entry(g).or_default() += v;
            }
            last = Some((e, root));
            before = p;
        }
        prop_assert_eq!(before, cents, "every centavo refunded");
        prop_assert_eq!(totals, sale_total, "the egresos credit exactly the sale");
        let (last, root) = last.expect("the refund of the rest is an egreso");
        let want = taxes(&original);
        let missed: BTreeMap<String, Decimal> = last.missed.iter().map(|(g, d)| (key(g), *d)).collect();
        for k in want.keys().chain(sums.keys()) {
            let (w, got) = (want.get(k).copied().unwrap_or_default(), sums.get(k).copied().unwrap_or_default());
            let miss = missed.get(k).copied().unwrap_or_default();
            // Exact, unless the last egreso says by how much it could not be, and then no line
            // of it could have carried a centavo more of what was missing.
            prop_assert_eq!(got + miss, w, "Σ egresos' {} against the original's", k);
            if !miss.is_zero() {
                prop_assert!(
                    !a_line_could_move(&root, k, if miss > Decimal::ZERO { Decimal::new(1, 2) } else { Decimal::new(-1, 2) }),
                    "the last egreso misses {miss} of {k} though a line could carry it"
                );
            }
        }
    }
}
