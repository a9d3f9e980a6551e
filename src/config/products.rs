//! `[invoice.products]` and `[invoice.shipping]`: the SAT keys of what is sold when the
//! product itself does not carry them (Stripe product metadata wins), and of shipping.

use serde::{Deserialize, Serialize};

use crate::cfdi::catalogs;

/// The SAT keys of one product, price or Stripe tax code; every key optional (what is missing
/// comes from `[invoice]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clave_prod_serv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clave_unidad: Option<String>,
    /// The unit's name as printed (Unidad, up to 20 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unidad: Option<String>,
    /// c_ObjetoImp: `01` (not subject to tax) or `02` (subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objeto_imp: Option<String>,
}

/// Shipping charged with a sale becomes a Concepto of its own with these keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShippingSettings {
    /// Default 78102203 (servicios de envío, transporte de paquetes).
    pub clave_prod_serv: String,
    pub clave_unidad: String,
    pub unidad: String,
    pub descripcion: String,
}

/// Why `keys` (named `what` in messages, each key as `{prefix}clave_prod_serv`, …) cannot be
/// used; empty when they can.
pub fn key_problems(what: &str, prefix: &str, keys: &ProductKeys) -> Vec<String> {
    let mut p = Vec::new();
    if let Some(k) = &keys.clave_prod_serv
        && !catalogs::in_xsd_catalog("c_ClaveProdServ", k)
    {
        p.push(format!(
            "{what}: {prefix}clave_prod_serv {k:?} is not in c_ClaveProdServ"
        ));
    }
    if let Some(k) = &keys.clave_unidad
        && !catalogs::in_xsd_catalog("c_ClaveUnidad", k)
    {
        p.push(format!(
            "{what}: {prefix}clave_unidad {k:?} is not in c_ClaveUnidad"
        ));
    }
    if let Some(u) = &keys.unidad
        && (u.trim().is_empty() || u.chars().count() > 20 || u.contains('|'))
    {
        p.push(format!(
            "{what}: {prefix}unidad {u:?} must be 1 to 20 characters, without `|`"
        ));
    }
    if let Some(o) = &keys.objeto_imp
        && !matches!(o.as_str(), "01" | "02")
    {
        p.push(format!(
            "{what}: {prefix}objeto_imp {o:?} must be \"01\" (not subject to tax) or \"02\" (subject to tax)"
        ));
    }
    p
}

impl ShippingSettings {
    pub fn keys(&self) -> ProductKeys {
        ProductKeys {
            clave_prod_serv: Some(self.clave_prod_serv.clone()),
            clave_unidad: Some(self.clave_unidad.clone()),
            unidad: Some(self.unidad.clone()),
            objeto_imp: None,
        }
    }
}

impl super::Settings {
    /// Every problem of `[invoice.products]`, `[invoice.shipping]` and the Stripe API keys.
    pub(super) fn product_key_problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (id, keys) in &self.invoice.products {
            p.extend(key_problems(&format!("[invoice.products.{id}]"), "", keys));
        }
        p.extend(key_problems(
            "[invoice.shipping]",
            "",
            &self.invoice.shipping.keys(),
        ));
        let s = &self.invoice.shipping.descripcion;
        if s.trim().is_empty() || s.chars().count() > 1000 || s.contains('|') {
            p.push(
                "[invoice.shipping] descripcion must be 1 to 1000 characters, without `|`".into(),
            );
        }
        let base = &self.stripe.api_base;
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            p.push(format!(
                "[stripe] api_base = {:?} must start with https:// (or http:// for a local test server)",
                super::url_for_log(base)
            ));
        }
        if self.stripe.fetch_timeout_seconds == 0 || self.stripe.retry_interval_seconds == 0 {
            p.push(
                "[stripe] fetch_timeout_seconds and retry_interval_seconds must be at least 1"
                    .into(),
            );
        }
        p
    }
}
