//! An egreso's taxes, line by line: each line's credit split into its Base, its traslado and
//! its retenciones on the currency's decimals, so the egreso's Total is exactly what its lines
//! credit, and each tax group carries what keeps the sale's egresos adding up to exactly what
//! the original charged or withheld, as far as Anexo 20's tolerance allows (docs/refunds.md).

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::cfdi::build::IMPUESTO_IVA;
use crate::cfdi::model::Concepto;
use crate::cfdi::money::round;
use crate::cfdi::validate::tax_in_tolerance;
use crate::cfdi::{LineData, RetencionData};

/// A group a document's summary adds its taxes up by (Anexo 20): a traslado by Impuesto and
/// TasaOCuota (TipoFactor Tasa; an exento traslado carries no amount), a retención by Impuesto.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaxGroup {
    Traslado { impuesto: String, tasa: Decimal },
    Retencion { impuesto: String },
}

impl std::fmt::Display for TaxGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaxGroup::Traslado { impuesto, tasa } => write!(f, "traslado {impuesto} {tasa}"),
            TaxGroup::Retencion { impuesto } => write!(f, "retención {impuesto}"),
        }
    }
}

/// Amounts per tax group.
pub type TaxSums = BTreeMap<TaxGroup, Decimal>;

/// The taxes of `conceptos` per group, each group's sum rounded once to `dec` decimals, as the
/// comprobante's summary rounds them.
pub(super) fn sums_of<'a>(conceptos: impl IntoIterator<Item = &'a Concepto>, dec: u32) -> TaxSums {
    let mut out = TaxSums::new();
    for c in conceptos {
        for t in &c.traslados {
            if let (Some(tasa), Some(i)) = (t.tasa, t.importe) {
                let g = TaxGroup::Traslado {
                    impuesto: t.impuesto.clone(),
                    tasa: tasa.normalize(),
                };
                *out.entry(g).or_default() += i;
            }
        }
        for r in &c.retenciones {
            let g = TaxGroup::Retencion {
                impuesto: r.impuesto.clone(),
            };
            *out.entry(g).or_default() += r.importe;
        }
    }
    out.values_mut().for_each(|v| *v = round(*v, dec));
    out
}

/// The weight of group `g` in a line of `line`'s rates: its tax per unit the line charges.
pub(super) fn weight(line: &LineData, g: &TaxGroup) -> Decimal {
    let Some(den) = charge_per_base(line) else {
        return Decimal::ZERO;
    };
    let rate: Decimal = match g {
        TaxGroup::Traslado { impuesto, tasa } => line
            .tax
            .rate()
            .filter(|r| impuesto == IMPUESTO_IVA && r.normalize() == *tasa)
            .unwrap_or_default(),
        TaxGroup::Retencion { impuesto } => line
            .retenciones
            .iter()
            .filter(|r| r.impuesto == *impuesto)
            .map(|r| r.tasa)
            .sum(),
    };
    rate / den
}

/// What a line charges per unit of its Base: 1 + its traslado's rate − its retenciones' rates.
fn charge_per_base(line: &LineData) -> Option<Decimal> {
    let withheld: Decimal = line.retenciones.iter().map(|r| r.tasa).sum();
    Some(Decimal::ONE + line.tax.rate().unwrap_or_default() - withheld)
        .filter(|d| *d > Decimal::ZERO)
}

/// One tax of a line: its group, its rate and its Importe.
#[derive(Debug, Clone)]
struct Slot {
    group: TaxGroup,
    rate: Decimal,
    amount: Decimal,
}

/// One line of an egreso: what it credits, `gross` (on the currency's decimals), split into
/// Base + traslado − retenciones, each on the currency's decimals.
#[derive(Debug, Clone)]
pub(super) struct Cut {
    gross: Decimal,
    /// The traslado first (when it has a rate), then the retenciones in the line's order.
    slots: Vec<Slot>,
    traslado: bool,
}

impl Cut {
    /// `gross` split at `line`'s rates, each tax the nearest to its exact share. `None` when
    /// the rates leave nothing to charge.
    pub(super) fn new(line: &LineData, gross: Decimal, dec: u32) -> Option<Cut> {
        let base = gross / charge_per_base(line)?;
        let rate = line.tax.rate();
        let traslado = rate.map(|r| Slot {
            group: TaxGroup::Traslado {
                impuesto: IMPUESTO_IVA.to_owned(),
                tasa: r.normalize(),
            },
            rate: r,
            amount: round(base * r, dec),
        });
        let retenciones = line.retenciones.iter().map(|r| Slot {
            group: TaxGroup::Retencion {
                impuesto: r.impuesto.clone(),
            },
            rate: r.tasa,
            amount: round(base * r.tasa, dec),
        });
        Some(Cut {
            gross,
            traslado: traslado.is_some(),
            slots: traslado.into_iter().chain(retenciones).collect(),
        })
    }

    fn base(&self) -> Decimal {
        let mut base = self.gross;
        for (i, s) in self.slots.iter().enumerate() {
            if i == 0 && self.traslado {
                base -= s.amount;
            } else {
                base += s.amount;
            }
        }
        base
    }

    /// Whether the PAC takes this line: a positive Base, and each tax within Anexo 20's
    /// tolerance of Base × rate (CFDI40167 for a traslado) as both are written.
    fn fits(&self, dec: u32) -> bool {
        let base = self.base();
        base > Decimal::ZERO
            && self.slots.iter().all(|s| {
                s.amount >= Decimal::ZERO && tax_in_tolerance(base, dec, s.rate, s.amount, dec)
            })
    }

    /// `line` rewritten as this cut: one unit at its Base, with its taxes fixed.
    pub(super) fn line(&self, line: &LineData) -> LineData {
        let mut slots = self.slots.iter();
        let tax_amount = if self.traslado {
            slots.next().map(|s| s.amount)
        } else {
            None
        };
        LineData {
            cantidad: Decimal::ONE,
            unit_price: self.base().normalize(),
            discount: None,
            tax_amount,
            retenciones: line
                .retenciones
                .iter()
                .zip(slots)
                .map(|(r, s)| RetencionData {
                    importe: Some(s.amount),
                    ..r.clone()
                })
                .collect(),
            ..line.clone()
        }
    }
}

fn carried(cuts: &[Cut], g: &TaxGroup) -> Decimal {
    cuts.iter()
        .flat_map(|c| &c.slots)
        .filter(|s| s.group == *g)
        .map(|s| s.amount)
        .sum()
}

/// Moves the lines' taxes a unit at a time toward `targets` (what each group should carry in
/// this egreso), each move on the line of the group that stays closest to its exact tax, and
/// never one that takes a line out of Anexo 20's tolerance. Every move brings one group a unit
/// closer and leaves the others' amounts as they are, so it ends. Returns, per group, what it
/// could not reach (target − carried; only the groups that missed).
pub(super) fn settle(cuts: &mut [Cut], targets: &TaxSums, dec: u32) -> TaxSums {
    let unit = Decimal::new(1, dec);
    loop {
        let mut moved = false;
        for (g, want) in targets {
            let have = carried(cuts, g);
            if have == *want {
                continue;
            }
            let step = if *want > have { unit } else { -unit };
            let mut best: Option<(Decimal, usize, usize)> = None;
            for (i, c) in cuts.iter().enumerate() {
                for (j, s) in c.slots.iter().enumerate().filter(|(_, s)| s.group == *g) {
                    let mut m = c.clone();
                    m.slots[j].amount = s.amount + step;
                    if !m.fits(dec) {
                        continue;
                    }
                    let off = (m.slots[j].amount - m.base() * s.rate).abs();
                    if best.is_none_or(|(o, _, _)| off < o) {
                        best = Some((off, i, j));
                    }
                }
            }
            if let Some((_, i, j)) = best {
                cuts[i].slots[j].amount += step;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    targets
        .iter()
        .map(|(g, want)| (g.clone(), *want - carried(cuts, g)))
        .filter(|(_, d)| !d.is_zero())
        .collect()
}
