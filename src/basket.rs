//! What was sold, line by line, turned into Conceptos: each line with its SAT keys (the
//! product's metadata, else `[invoice.products]` by price, product or tax code, else the
//! `[invoice]` defaults; every key checked against the catalogs), its share of the discounts,
//! its tax, and shipping as a Concepto of its own. No I/O: the providers' clients fill
//! [`SaleLine`]s, [`crate::ingest`] freezes what this makes of them.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::cfdi::money::{MAX_DECIMALS, round};
use crate::cfdi::{LineData, TaxTreatment};
use crate::config::{InvoiceSettings, ProductKeys, key_problems};

/// Product metadata keys (Stripe product `metadata`) carrying the product's SAT keys.
pub const META_CLAVE_PROD_SERV: &str = "sat_clave_prod_serv";
pub const META_CLAVE_UNIDAD: &str = "sat_clave_unidad";
pub const META_UNIDAD: &str = "sat_unidad";
pub const META_OBJETO_IMP: &str = "sat_objeto_imp";

/// One line of a sale as the provider described it, before any SAT key is chosen. Stored with
/// the payment (`payments.lines_json`), so every later plan of the sale sees the same lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SaleLine {
    pub description: String,
    pub quantity: Decimal,
    /// Quantity × unit price before any discount, in major units of the sale's currency, on
    /// the sale's tax basis (tax included when the price includes it).
    pub amount: Decimal,
    /// The line's share of every discount (its own and the order's, prorated by the provider
    /// to the centavo), major units.
    pub discount: Decimal,
    /// The IVA rate the provider's tax engine applied (Stripe Tax), in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tax_percent: Option<Decimal>,
    /// The IVA the provider's tax engine computed for the line (Stripe Tax `taxes[].amount`),
    /// major units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tax_amount: Option<Decimal>,
    /// Whether the price includes the tax, when the provider says (Stripe `tax_behavior`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tax_inclusive: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    /// The price id (Stripe `price_…`, or the shipping rate `shr_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_id: Option<String>,
    /// The provider's tax code (Stripe `txcd_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tax_code: Option<String>,
    /// The SAT keys the product itself carries (its metadata).
    pub keys: ProductKeys,
    /// Shipping: keyed by `[invoice.shipping]` unless mapped by its rate id.
    pub shipping: bool,
}

impl SaleLine {
    /// The product's name and id, as messages name it.
    fn name(&self) -> String {
        let id = self
            .product_id
            .as_deref()
            .or(self.price_id.as_deref())
            .unwrap_or("no id");
        if self.shipping {
            format!("shipping ({id})")
        } else {
            format!("product {:?} ({id})", self.description)
        }
    }
}

/// The SAT keys of a product from its metadata map (string → string); blank values are absent.
pub fn keys_from_metadata(meta: Option<&serde_json::Value>) -> ProductKeys {
    let get = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    ProductKeys {
        clave_prod_serv: get(META_CLAVE_PROD_SERV),
        clave_unidad: get(META_CLAVE_UNIDAD),
        unidad: get(META_UNIDAD),
        objeto_imp: get(META_OBJETO_IMP),
    }
}

/// The Conceptos of `lines` and whether their prices include the tax. `tax` is the configured
/// treatment; `Err` says which product or key stops the sale from being invoiced.
pub fn conceptos(
    lines: &[SaleLine],
    cfg: &InvoiceSettings,
    tax: TaxTreatment,
) -> Result<(Vec<LineData>, bool), String> {
    let mut inclusive = None;
    for l in lines {
        match (inclusive, l.tax_inclusive) {
            (Some(a), Some(b)) if a != b => {
                return Err(
                    "the sale mixes tax-inclusive and tax-exclusive prices: invoice it by hand"
                        .into(),
                );
            }
            (None, b) => inclusive = b,
            _ => {}
        }
    }
    let include_tax = inclusive.unwrap_or(cfg.prices_include_tax);
    let out = lines
        .iter()
        .map(|l| concepto(l, cfg, tax))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((out, include_tax))
}

/// The keys of `l`: its own (metadata) first, then the first `[invoice.products]` entry of its
/// price, product or tax code (`[invoice.shipping]` for shipping), then the defaults.
fn keys_of(l: &SaleLine, cfg: &InvoiceSettings) -> Result<ProductKeys, String> {
    let own = key_problems(&format!("{} metadata", l.name()), "sat_", &l.keys);
    if !own.is_empty() {
        return Err(own.join("; "));
    }
    let mapped = [&l.price_id, &l.product_id, &l.tax_code]
        .into_iter()
        .flatten()
        .find_map(|id| cfg.products.get(id))
        .cloned()
        .or_else(|| l.shipping.then(|| cfg.shipping.keys()))
        .unwrap_or_default();
    let own = l.keys.clone();
    let clave_unidad = own
        .clave_unidad
        .or(mapped.clave_unidad)
        .unwrap_or_else(|| cfg.clave_unidad.clone());
    // The default unit name only fits the default unit.
    let default_unidad = (clave_unidad == cfg.clave_unidad).then(|| cfg.unidad.clone());
    Ok(ProductKeys {
        clave_prod_serv: own
            .clave_prod_serv
            .or(mapped.clave_prod_serv)
            .or_else(|| Some(cfg.clave_prod_serv.clone())),
        unidad: own.unidad.or(mapped.unidad).or(default_unidad),
        clave_unidad: Some(clave_unidad),
        objeto_imp: own.objeto_imp.or(mapped.objeto_imp),
    })
}

/// The IVA treatment of a line: not subject (`01`), else the rate Stripe Tax applied, else the
/// configured one.
fn tax_of(l: &SaleLine, keys: &ProductKeys, tax: TaxTreatment) -> Result<TaxTreatment, String> {
    if keys.objeto_imp.as_deref() == Some("01") {
        return Ok(TaxTreatment::NoObjeto);
    }
    let Some(p) = l.tax_percent else {
        return match (keys.objeto_imp.as_deref(), tax) {
            (Some("02"), TaxTreatment::NoObjeto) => Err(format!(
                "{} is subject to tax (objeto_imp 02) but [invoice] tax is no_objeto: set the IVA rate",
                l.name()
            )),
            _ => Ok(tax),
        };
    };
    match p.normalize() {
        p if p == Decimal::from(16) => Ok(TaxTreatment::Iva16),
        p if p == Decimal::from(8) => Ok(TaxTreatment::Iva8),
        p if p.is_zero() => Ok(TaxTreatment::Iva0),
        p => Err(format!(
            "{}: the tax rate {p}% is not an IVA rate (16, 8 or 0): invoice it by hand",
            l.name()
        )),
    }
}

fn concepto(l: &SaleLine, cfg: &InvoiceSettings, tax: TaxTreatment) -> Result<LineData, String> {
    let keys = keys_of(l, cfg)?;
    let problems = key_problems(&l.name(), "", &keys);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    if l.quantity <= Decimal::ZERO || l.amount < Decimal::ZERO || l.discount < Decimal::ZERO {
        return Err(format!(
            "{}: quantity {}, amount {} and discount {} must not be negative",
            l.name(),
            l.quantity,
            l.amount,
            l.discount
        ));
    }
    // Cantidad × ValorUnitario must give the line's amount back; a price that does not
    // divide evenly is invoiced as one unit of the whole line, the quantity said in words.
    let unit = round(l.amount / l.quantity, MAX_DECIMALS);
    let (cantidad, unit_price, descripcion) = if unit * l.quantity == l.amount {
        (l.quantity, unit, l.description.clone())
    } else {
        (
            Decimal::ONE,
            l.amount,
            format!("{} x {}", l.quantity.normalize(), l.description),
        )
    };
    let default = if l.shipping {
        &cfg.shipping.descripcion
    } else {
        &cfg.descripcion
    };
    let descripcion = clean_text(&descripcion, default, 1000);
    Ok(LineData {
        clave_prod_serv: keys.clave_prod_serv.clone().unwrap_or_default(),
        no_identificacion: l
            .product_id
            .as_deref()
            .or(l.price_id.as_deref())
            .map(|s| s.chars().take(100).collect()),
        cantidad,
        clave_unidad: keys.clave_unidad.clone().unwrap_or_default(),
        unidad: keys.unidad.clone(),
        descripcion,
        unit_price,
        discount: (!l.discount.is_zero()).then_some(l.discount),
        tax: tax_of(l, &keys, tax)?,
        tax_amount: l.tax_amount,
        retenciones: Vec::new(),
    })
}

/// Spreads `extra`, an order discount the lines do not carry yet, over the lines that are not
/// shipping, in proportion to what each still costs, to the currency's `dp` decimals: each
/// gets its share rounded down, and the units rounding left over go one each to the largest
/// remainders (the first line on a tie), so the shares add up to `extra` exactly.
pub fn prorate_discount(lines: &mut [SaleLine], extra: Decimal, dp: u32) -> Result<(), String> {
    let unit = Decimal::new(1, dp);
    let items: Vec<usize> = (0..lines.len()).filter(|&i| !lines[i].shipping).collect();
    let net = |l: &SaleLine| l.amount - l.discount;
    let total: Decimal = items.iter().map(|&i| net(&lines[i])).sum();
    if extra > total || total <= Decimal::ZERO {
        return Err(format!(
            "an order discount of {extra} is more than the lines cost ({total})"
        ));
    }
    let mut shares: Vec<(usize, Decimal, Decimal)> = items
        .iter()
        .map(|&i| {
            let exact = extra * net(&lines[i]) / total;
            let floor = (exact / unit).floor() * unit;
            (i, floor, exact - floor)
        })
        .collect();
    let mut left = extra - shares.iter().map(|s| s.1).sum::<Decimal>();
    let mut by_remainder: Vec<usize> = (0..shares.len()).collect();
    by_remainder.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(a.cmp(&b)));
    for k in by_remainder {
        if left < unit {
            break;
        }
        shares[k].1 += unit;
        left -= unit;
    }
    for (i, share, _) in shares {
        lines[i].discount += share;
    }
    Ok(())
}

/// A description fit for the CFDI: `|` and control characters replaced, at most `max` chars;
/// `default` when nothing is left.
pub fn clean_text(s: &str, default: &str, max: usize) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c == '|' || c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        default.to_owned()
    } else {
        cleaned.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn line(desc: &str, amount: i64, discount: i64) -> SaleLine {
        SaleLine {
            description: desc.into(),
            quantity: Decimal::ONE,
            amount: Decimal::new(amount, 2),
            discount: Decimal::new(discount, 2),
            ..SaleLine::default()
        }
    }

    #[test]
    fn an_order_discount_is_prorated_to_the_centavo_and_adds_up_exactly() {
        let mut lines = vec![
            line("a", 30000, 2000),
            line("b", 34900, 0),
            line("c", 120000, 0),
        ];
        lines.push(SaleLine {
            shipping: true,
            ..line("envío", 9900, 0)
        });
        prorate_discount(&mut lines, Decimal::new(10000, 2), 2).expect("prorate");
        let d: Vec<String> = lines.iter().map(|l| l.discount.to_string()).collect();
        assert_eq!(
            d,
            ["35.31", "19.08", "65.61", "0.00"],
            "shipping keeps no share"
        );
        // Three equal lines share 0.10 as 0.04, 0.03, 0.03: the first line takes the tie.
        let mut even = vec![line("a", 100, 0), line("b", 100, 0), line("c", 100, 0)];
        prorate_discount(&mut even, Decimal::new(10, 2), 2).expect("prorate");
        let d: Vec<String> = even.iter().map(|l| l.discount.to_string()).collect();
        assert_eq!(d, ["0.04", "0.03", "0.03"]);
        let err = prorate_discount(&mut even, Decimal::new(400, 2), 2).expect_err("too much");
        assert!(err.contains("more than the lines cost"), "{err}");
    }

    #[test]
    fn keys_come_from_metadata_then_the_mapping_then_the_defaults() {
        let toml = "[invoice.products.price_b]\nclave_prod_serv = \"53102501\"\nclave_unidad = \"H87\"\n\
                    [invoice.products.txcd_10000000]\nclave_prod_serv = \"43232408\"\nobjeto_imp = \"01\"\n";
        let s = Settings::from_parts(Some(toml), &[]).expect("settings");
        let meta =
            serde_json::json!({ "sat_clave_prod_serv": "52151602", "sat_clave_unidad": "H87" });
        let lines = vec![
            SaleLine {
                keys: keys_from_metadata(Some(&meta)),
                // Metadata wins over a mapping of its price.
                price_id: Some("price_b".into()),
                ..line("taza", 10000, 0)
            },
            SaleLine {
                price_id: Some("price_b".into()),
                ..line("playera", 10000, 0)
            },
            SaleLine {
                tax_code: Some("txcd_10000000".into()),
                ..line("software", 10000, 0)
            },
            line("otro", 10000, 0),
            SaleLine {
                shipping: true,
                ..line("", 9900, 0)
            },
        ];
        let (c, included) = conceptos(&lines, &s.invoice, TaxTreatment::Iva16).expect("conceptos");
        assert!(included);
        let keys: Vec<(&str, &str, Option<&str>, TaxTreatment)> = c
            .iter()
            .map(|l| {
                (
                    l.clave_prod_serv.as_str(),
                    l.clave_unidad.as_str(),
                    l.unidad.as_deref(),
                    l.tax,
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("52151602", "H87", None, TaxTreatment::Iva16),
                ("53102501", "H87", None, TaxTreatment::Iva16),
                ("43232408", "ACT", Some("Actividad"), TaxTreatment::NoObjeto),
                ("01010101", "ACT", Some("Actividad"), TaxTreatment::Iva16),
                ("78102203", "E48", Some("Servicio"), TaxTreatment::Iva16),
            ]
        );
        assert_eq!(c[4].descripcion, "Envío");
    }

    #[test]
    fn an_unknown_key_or_tax_rate_names_the_product_and_the_key() {
        let s = Settings::defaults().expect("settings");
        let meta = serde_json::json!({ "sat_clave_unidad": "ZZZ", "sat_objeto_imp": "09" });
        let bad = SaleLine {
            product_id: Some("prod_x".into()),
            keys: keys_from_metadata(Some(&meta)),
            ..line("Taza", 10000, 0)
        };
        let err = conceptos(&[bad], &s.invoice, TaxTreatment::Iva16).expect_err("unknown");
        assert!(
            err.contains("product \"Taza\" (prod_x) metadata: sat_clave_unidad \"ZZZ\" is not in c_ClaveUnidad")
                && err.contains("sat_objeto_imp \"09\""),
            "{err}"
        );
        let odd_rate = SaleLine {
            tax_percent: Some(Decimal::new(105, 1)),
            ..line("Taza", 10000, 0)
        };
        let err = conceptos(&[odd_rate], &s.invoice, TaxTreatment::Iva16).expect_err("rate");
        assert!(err.contains("tax rate 10.5% is not an IVA rate"), "{err}");
    }

    #[test]
    fn a_mapping_with_an_unknown_key_is_refused_at_load() {
        let toml = "[invoice.products.prod_x]\nclave_prod_serv = \"12345678\"\n";
        let err = Settings::from_parts(Some(toml), &[])
            .expect_err("bad key")
            .to_string();
        assert!(
            err.contains(
                "[invoice.products.prod_x]: clave_prod_serv \"12345678\" is not in c_ClaveProdServ"
            ),
            "{err}"
        );
    }
}
