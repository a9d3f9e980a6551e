//! Whether the settings can be used: every problem found, each naming its key and the fix.

use std::net::SocketAddr;

use super::secret::redact_url;
use super::{ConfigError, Settings, url_for_log};

impl Settings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        if self.server.listen.parse::<SocketAddr>().is_err() {
            p.push(format!(
                "[server] listen = {:?} is not host:port with an IP address (e.g. \"127.0.0.1:8080\")",
                self.server.listen
            ));
        }
        if self.server.body_limit_bytes < 1024 {
            p.push("[server] body_limit_bytes must be at least 1024".into());
        }
        if let Err(e) = crate::proxy::TrustedProxies::parse(&self.server.trusted_proxies) {
            p.push(format!("[server] trusted_proxies: {e}"));
        }
        if let Some(admin) = &self.admin.listen
            && admin.parse::<SocketAddr>().is_err()
        {
            p.push(format!(
                "[admin] listen = {admin:?} is not host:port with an IP address (e.g. \"127.0.0.1:8081\"); \
                 leave it unset to serve the admin on [server] listen"
            ));
        }
        let url = self.database.url.expose();
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            p.push(format!(
                "[database] url = {:?} must start with sqlite:, postgres:// or postgresql://",
                redact_url(url)
            ));
        }
        if let Some(u) = &self.api.webhook_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                p.push(format!(
                    "[api] webhook_url = {:?} must start with http:// or https://",
                    url_for_log(u)
                ));
            }
            if self.api.webhook_secret.is_none() {
                p.push("[api] webhook_url needs webhook_secret (whsec_ + base64)".into());
            }
        }
        if let Some(secret) = &self.api.webhook_secret
            && secret.key().is_none()
        {
            p.push("[api] webhook_secret must be whsec_ followed by base64".into());
        }
        if let Some(u) = &self.log.otlp_endpoint {
            if !cfg!(feature = "otel") {
                p.push(
                    "[log] otlp_endpoint needs a binary built with the `otel` feature \
                     (cargo build --release --features otel); remove it or rebuild"
                        .into(),
                );
            } else if !(u.starts_with("http://") || u.starts_with("https://")) {
                p.push(format!(
                    "[log] otlp_endpoint = {:?} must be the collector's http(s):// traces URL \
                     (e.g. http://collector:4318/v1/traces)",
                    url_for_log(u)
                ));
            }
        }
        if self.api.key_retention_hours == 0 {
            p.push("[api] key_retention_hours must be at least 1".into());
        }
        if self.database.max_connections == 0 {
            p.push("[database] max_connections must be at least 1".into());
        }
        let kind = self.pac_kind();
        if !matches!(kind, "sandbox" | "sw" | "finkok") {
            p.push(format!(
                "[pac] kind = {kind:?}: expected \"sandbox\", \"sw\" or \"finkok\""
            ));
        }
        if kind != "sandbox" {
            if self.uses_sandbox_stripe_secret() || self.uses_sandbox_mp_secret() {
                p.push("the sandbox webhook secrets cannot be used with a real PAC".into());
            }
            if self.emisor.csd_cer.is_none()
                || self.emisor.csd_key.is_none()
                || self.emisor.csd_password.is_none()
            {
                p.push(format!(
                    "[emisor] csd_cer, csd_key and csd_password are required with [pac] kind = {kind:?} \
                     (the SAT test CSD is only for the sandbox)"
                ));
            }
        }
        for (i, s) in self.stripe.webhook_secrets.iter().enumerate() {
            if s.expose().trim() != s.expose() || s.expose().is_empty() {
                p.push(format!(
                    "[stripe] webhook_secrets[{i}] is empty or has surrounding spaces"
                ));
            }
        }
        if !(0..=3600).contains(&self.stripe.tolerance_seconds)
            || self.stripe.tolerance_seconds == 0
        {
            p.push(
                "[stripe] tolerance_seconds must be between 1 and 3600 (Stripe uses 300)".into(),
            );
        }
        if self.mercadopago.tolerance_seconds < 0 {
            p.push("[mercadopago] tolerance_seconds must be 0 (log only) or positive".into());
        }
        if !(self.mercadopago.api_base.starts_with("http://")
            || self.mercadopago.api_base.starts_with("https://"))
        {
            p.push(format!(
                "[mercadopago] api_base = {:?} must be an http(s) URL",
                self.mercadopago.api_base
            ));
        }
        if self.mercadopago.retry_interval_seconds == 0
            || self.mercadopago.fetch_timeout_seconds == 0
        {
            p.push(
                "[mercadopago] retry_interval_seconds and fetch_timeout_seconds must be positive"
                    .into(),
            );
        }
        let e = &self.emisor;
        if let Err(err) = crate::cfdi::Rfc::parse(&e.rfc) {
            p.push(format!("[emisor] rfc: {err}"));
        }
        if e.nombre.trim().is_empty() {
            p.push("[emisor] nombre is required (the name registered with the SAT, without the régimen de capital)".into());
        }
        if !crate::cfdi::catalogs::is_regimen(&e.regimen_fiscal) {
            p.push(format!(
                "[emisor] regimen_fiscal = {:?} is not in c_RegimenFiscal (e.g. \"601\")",
                e.regimen_fiscal
            ));
        }
        if !is_postal_code(&e.lugar_expedicion) {
            p.push(format!(
                "[emisor] lugar_expedicion = {:?} must be a 5-digit postal code",
                e.lugar_expedicion
            ));
        } else if !crate::cfdi::catalogs::is_codigo_postal(&e.lugar_expedicion) {
            // A PAC refuses it, and its huso_horario (the zone of every Fecha) is unknown.
            p.push(format!(
                "[emisor] lugar_expedicion = {:?} is not in c_CodigoPostal: give the postal code of the place of issue as the SAT lists it",
                e.lugar_expedicion
            ));
        }
        if e.serie.is_empty()
            || e.serie.len() > 25
            || !e.serie.chars().all(|c| c.is_ascii_alphanumeric())
        {
            p.push(format!(
                "[emisor] serie = {:?} must be 1 to 25 letters or digits",
                e.serie
            ));
        }
        if e.csd_cer.is_some() != e.csd_key.is_some() {
            p.push("[emisor] csd_cer and csd_key go together".into());
        }
        for f in [&e.csd_cer, &e.csd_key].into_iter().flatten() {
            if !f.exists() {
                p.push(format!("[emisor] CSD file {} does not exist", f.display()));
            }
        }
        let inv = &self.invoice;
        if inv.currencies.is_empty() {
            p.push(
                "[invoice] currencies must list at least one currency (e.g. [\"MXN\"]), or \"*\" for every c_Moneda currency"
                    .into(),
            );
        }
        for c in inv.currencies.iter().filter(|c| *c != "*") {
            if crate::cfdi::catalogs::currency_decimals(c).is_none() {
                p.push(format!(
                    "[invoice] currencies: {c:?} is not a c_Moneda code (uppercase, e.g. \"MXN\")"
                ));
            }
        }
        if crate::cfdi::catalogs::uso_allows(&inv.uso_cfdi, "601").is_none() {
            p.push(format!(
                "[invoice] uso_cfdi = {:?} is not in c_UsoCFDI",
                inv.uso_cfdi
            ));
        }
        if self.tax_treatment().is_none() {
            p.push(format!(
                "[invoice] tax = {:?}: expected iva16, iva8, iva0, exento or no_objeto",
                inv.tax
            ));
        }
        if !matches!(inv.metodo_pago.as_str(), "PUE" | "PPD") {
            p.push(format!(
                "[invoice] metodo_pago = {:?}: expected PUE or PPD",
                inv.metodo_pago
            ));
        }
        let fp = &self.forma_pago;
        let codes = [
            ("default", &fp.default),
            ("card_credit", &fp.card_credit),
            ("card_debit", &fp.card_debit),
            ("card_prepaid", &fp.card_prepaid),
            ("card_unknown", &fp.card_unknown),
            ("oxxo", &fp.oxxo),
            ("spei", &fp.spei),
        ];
        for (k, v) in codes
            .into_iter()
            .chain(fp.mercadopago.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if !crate::cfdi::catalogs::is_forma_pago(v) {
                p.push(format!(
                    "[forma_pago] {k} = {v:?} is not in c_FormaPago (e.g. \"04\")"
                ));
            }
        }
        self.fx.check(&mut p);
        self.pac.check_environment("[pac]", &mut p);
        if let Some(b) = &self.pac.backup {
            b.check_environment("[pac.backup]", &mut p);
            if let (Ok(a), Ok(bk)) = (self.pac.environment(), b.environment())
                && a != bk
            {
                p.push(format!(
                    "[pac.backup] is a {} environment but [pac] is a {} one: a backup must stamp in the same environment",
                    bk.name(),
                    a.name()
                ));
            }
        }
        self.worker.check(&mut p);
        self.global.check(&self.emisor.regimen_fiscal, &mut p);
        self.refunds.check(&mut p);
        self.arca.check(&mut p);
        p.extend(self.portal.problems());
        p.extend(self.email.problems());
        p.extend(self.product_key_problems());
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p))
        }
    }
}

fn is_postal_code(s: &str) -> bool {
    s.len() == 5 && s.chars().all(|c| c.is_ascii_digit())
}
