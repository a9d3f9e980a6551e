//! The one table of known SAT, PAC and appliance codes: who says each, and what an operator
//! does about it, in plain words. The dashboard's error groups, the lists and the detail
//! pages all read their hints from here; a code not listed is shown verbatim with no hint.

/// Who a message comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The PAC itself (its own checks, its transport, its dedup).
    Pac,
    /// A SAT validation rule (Anexo 20), checked and reported by the PAC.
    Sat,
    /// This appliance (its window, its retries, its sealing, its ingest).
    Appliance,
}

impl Source {
    pub const fn label(self) -> &'static str {
        match self {
            Self::Pac => "PAC",
            Self::Sat => "SAT (via the PAC)",
            Self::Appliance => "appliance",
        }
    }
}

/// A known code.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    pub code: &'static str,
    pub source: Source,
    /// Short, what it means.
    pub title: &'static str,
    /// What to do.
    pub hint: &'static str,
}

/// What the action of a group of failures is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// The same bytes may pass later (a transient check, a PAC outage): retry them all.
    Retry,
    /// The data must change: edit and refreeze each one.
    Refreeze,
    /// The sale cannot be invoiced to this receptor (a generic RFC on a nominative CFDI):
    /// send them all to the factura global.
    Global,
    /// Nothing to press: wait, or read the document.
    None,
}

const fn k(code: &'static str, source: Source, title: &'static str, hint: &'static str) -> Known {
    Known {
        code,
        source,
        title,
        hint,
    }
}

use Source::{Appliance, Pac, Sat};

/// Every known code. Keep it sorted by source, then code.
pub const KNOWN: &[Known] = &[
    k(
        "CFDI40102",
        Sat,
        "the Sello does not match the document",
        "Usually a transient validation problem at the PAC or a CSD mismatch: retry; if it repeats, check that [emisor] csd_cer and csd_key are the same pair.",
    ),
    k(
        "CFDI40108",
        Sat,
        "SubTotal does not match the sum of the concepts",
        "A rounding bug in how the request was built: report it; then refreeze so a new document is sealed.",
    ),
    k(
        "CFDI40119",
        Sat,
        "Total does not match SubTotal, discounts and taxes",
        "A rounding bug in how the request was built: report it; then refreeze.",
    ),
    k(
        "CFDI40115",
        Sat,
        "a currency other than MXN without TipoCambio",
        "Give the exchange rate: refreeze after fixing the sale's TipoCambio.",
    ),
    k(
        "CFDI40118",
        Sat,
        "TipoCambio outside the limits of the published rate",
        "Check the rate against Banxico's FIX of the day before (c_Moneda allows 5 %); refreeze with the right TipoCambio.",
    ),
    k(
        "CFDI40143",
        Sat,
        "RFC not registered with the SAT",
        "The customer's RFC is not in the SAT's list: ask the customer for their Constancia de Situación Fiscal, correct the RFC and refreeze, or send the sale to the factura global.",
    ),
    k(
        "CFDI40144",
        Sat,
        "the receptor's name does not match its RFC",
        "Write the name exactly as in the customer's Constancia de Situación Fiscal (no régimen suffix such as S.A. de C.V.) and refreeze.",
    ),
    k(
        "CFDI40145",
        Sat,
        "the receptor's name does not match its RFC",
        "Write the name exactly as in the customer's Constancia de Situación Fiscal and refreeze.",
    ),
    k(
        "CFDI40146",
        Sat,
        "generic RFC used incorrectly",
        "XAXX010101000 goes only in a factura global: send the sale to the global or ask the customer for their RFC.",
    ),
    k(
        "CFDI40147",
        Sat,
        "the receptor's postal code does not match its RFC",
        "Use the postal code of the customer's Constancia de Situación Fiscal and refreeze.",
    ),
    k(
        "CFDI40157",
        Sat,
        "the receptor's régimen fiscal does not match its RFC",
        "Choose the régimen of the customer's Constancia de Situación Fiscal and refreeze.",
    ),
    k(
        "CFDI40158",
        Sat,
        "the receptor's régimen fiscal does not match its RFC",
        "Choose the régimen of the customer's Constancia de Situación Fiscal and refreeze.",
    ),
    k(
        "CFDI40161",
        Sat,
        "UsoCFDI does not fit the receptor's régimen",
        "Pick a UsoCFDI the régimen allows (G03 fits most) and refreeze.",
    ),
    k(
        "CFDI40167",
        Sat,
        "a line's tax does not match Base × rate",
        "A rounding bug in how the request was built: report it; then refreeze.",
    ),
    k(
        "CFDI40215",
        Sat,
        "the document's tax total does not match its lines",
        "A rounding bug in how the request was built: report it; then refreeze.",
    ),
    k(
        "CFDI40221",
        Sat,
        "TotalImpuestosTrasladados does not match the lines",
        "A rounding bug in how the request was built: report it; then refreeze.",
    ),
    k(
        "CFDI3307",
        Pac,
        "the stamp key already holds another document's stamp",
        "Two different documents were sent under one key: do not retry; open the document and run reconciliation to see which stamp exists.",
    ),
    k(
        "307",
        Pac,
        "the PAC already stamped these bytes",
        "Nothing to do: the appliance records the existing stamp.",
    ),
    k(
        "WINDOW",
        Appliance,
        "past SAT's 72-hour window",
        "The Fecha is too old to stamp: refreeze (a new document with today's Fecha).",
    ),
    k(
        "EXHAUSTED",
        Appliance,
        "retries ran out while the PAC did not process it",
        "The PAC was out for longer than the retries last: check the PAC's status, then retry.",
    ),
    k(
        "SEAL",
        Appliance,
        "the frozen data cannot be sealed",
        "Check the CSD ([emisor] csd_cer, csd_key, csd_password) or fix the data and refreeze.",
    ),
    k(
        "UNRESOLVED",
        Appliance,
        "the PAC never said whether it stamped it",
        "Ask the PAC yourself by the stamp key; 'Ask the PAC now' records its answer. Never refreeze before that.",
    ),
    k(
        "live_to_test_pac",
        Appliance,
        "a live payment with a PAC in its test environment",
        "Point [pac] at the production service (or set [pac] environment = \"production\"), restart, then retry: a test stamp has no fiscal value.",
    ),
    k(
        "test_mode",
        Appliance,
        "a test-mode payment with a production PAC",
        "Nothing to stamp: a test payment never goes to a production PAC.",
    ),
];

/// The entry for `code`, if known (exact, case-insensitive).
pub fn lookup(code: &str) -> Option<&'static Known> {
    let code = code.trim();
    if code.is_empty() {
        return None;
    }
    KNOWN.iter().find(|k| k.code.eq_ignore_ascii_case(code))
}

/// What a group of failures with `code` offers.
pub fn fix(code: &str) -> Fix {
    match code {
        "CFDI40102" | "EXHAUSTED" => Fix::Retry,
        "CFDI40146" => Fix::Global,
        "UNRESOLVED" | "test_mode" | "live_to_test_pac" | "307" | "CFDI3307" => Fix::None,
        "" => Fix::None,
        _ => Fix::Refreeze,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_with_a_hint() {
        let mut seen = std::collections::HashSet::new();
        for k in KNOWN {
            assert!(seen.insert(k.code), "{} listed twice", k.code);
            assert!(!k.hint.is_empty() && !k.title.is_empty(), "{}", k.code);
        }
        assert_eq!(lookup("cfdi40143").map(|k| k.source), Some(Source::Sat));
        assert!(lookup("").is_none() && lookup("NOPE").is_none());
        assert_eq!(fix("CFDI40102"), Fix::Retry);
        assert_eq!(fix("CFDI40143"), Fix::Refreeze);
        assert_eq!(fix("CFDI40146"), Fix::Global);
        assert_eq!(fix("live_to_test_pac"), Fix::None);
        assert!(lookup("live_to_test_pac").is_some_and(|k| k.hint.contains("production")));
    }
}
