//! Property tests of refunds → egresos: for random sales (lines, discounts, IVA 16/8/0/exento,
//! not subject to tax, prices with or without tax) and random sequences of partial refunds that
//! add up to the sale, every egreso passes the sandbox's checks (XSD facets and catalogs, the
//! amount rules, the Sello), each egreso's Total is exactly its refund and together exactly the
//! sale's, and their taxes add up to the original's within the rounding each document does
//! once (a centavo per document): see docs/refunds.md.

use autofactura::cfdi::dom::{Element, NS_CFDI};
use autofactura::cfdi::validate::check_amounts;
use autofactura::cfdi::{self, InvoiceRequest, LineData};
use autofactura::refund::{Original, egreso_request};
use proptest::prelude::*;
use rust_decimal::Decimal;

use crate::cfdi_props::{ingreso, tax};

const UUID: &str = "5FB2822E-396D-4725-8521-CDC4BDD20CCF";

fn line() -> impl Strategy<Value = LineData> {
    (
        1i64..5,
        1i64..2_000_000,
        prop::option::weighted(0.3, 1i64..100),
        tax(),
    )
        .prop_map(|(qty, cents, discount_pct, tax)| {
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
                retenciones: vec![],
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

fn taxes(root: &Element) -> Decimal {
    root.child(NS_CFDI, "Impuestos")
        .map_or(Decimal::ZERO, |i| amount(i, "TotalImpuestosTrasladados"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

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
        let (mut totals, mut trasladados, mut egresos) = (Decimal::ZERO, Decimal::ZERO, 0usize);
        for p in points {
            let o = Original {
                request: &req,
                uuid: UUID,
                lines: (0..req.lines.len()).collect(),
                sale_amount: sale_total,
                refunded_before: Decimal::new(before, 2),
            };
            let mut e = match egreso_request(&o, Decimal::new(p - before, 2), "NC", req.fecha) {
                Ok(e) => e,
                Err(err) => {
                    // Only a refund too small for any line may be refused; it is credited with the next.
                    prop_assert!(err.to_string().contains("less than one centavo"), "{err}");
                    continue;
                }
            };
            e.folio = Some("1".into());
            let root = parsed(&e);
            let structure = autofactura::pacsim::schema::check(&root);
            prop_assert!(structure.is_empty(), "sandbox schema: {structure:?}");
            let problems = check_amounts(&root);
            prop_assert!(problems.is_empty(), "sandbox amounts: {problems:?}");
            prop_assert_eq!(root.attr("TipoDeComprobante"), Some("E"));
            totals += amount(&root, "Total");
            egresos += 1;
            // Each line's share is cut with its taxes and the engine fits the Total to what the
            // shares charge (see refund::egreso_request and cfdi::build), so each egreso
            // credits exactly what was refunded, with prices with or without tax.
            prop_assert_eq!(amount(&root, "Total"), Decimal::new(p - before, 2), "egreso Total for a refund");
            trasladados += taxes(&root);
            before = p;
        }
        prop_assert_eq!(before, cents, "every centavo refunded");
        prop_assert_eq!(totals, sale_total, "the egresos credit exactly the sale");
        // Every document rounds its taxes once (Anexo 20), and a line's tax must stay within
        // the SAT's tolerance of its Base: the split of each Total between SubTotal and taxes
        // may drift from the original's by that rounding, at most a centavo per document.
        let slack = Decimal::new(i64::try_from(egresos + 1).expect("few"), 2);
        let t = taxes(&original);
        prop_assert!((trasladados - t).abs() <= slack, "Σ egreso traslados {trasladados} vs {t} over {egresos} egresos");
    }
}
