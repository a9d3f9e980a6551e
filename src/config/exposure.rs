//! What must not face anyone but this machine: the sandbox conveniences and the example admin
//! password on a listener beyond loopback. `serve` refuses to start while any is left.

use super::{
    ConfigError, EXAMPLE_ADMIN_PASSWORD, SANDBOX_MP_SECRET, SANDBOX_STRIPE_SECRET, SecretString,
    Settings,
};

impl Settings {
    /// What must not face anyone but this machine: the sandbox webhook secrets and the
    /// Mercado Pago stand-in on a webhook listener beyond loopback (anyone could sign a
    /// "payment" with secrets published in the source), and the example admin password on an
    /// admin listener beyond loopback. `serve` refuses to start while any is left.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        if let Some(why) = self.exposed(&self.server.listen, "[server] listen") {
            if self.uses_sandbox_stripe_secret() {
                p.push(format!(
                    "{why}, and the Stripe webhook secret is the built-in sandbox one, published in \
                     the source: set [stripe] webhook_secrets (AUTOFACTURA__STRIPE__WEBHOOK_SECRETS) \
                     to your endpoint's signing secret"
                ));
            }
            if self.uses_sandbox_mp_secret() {
                p.push(format!(
                    "{why}, and the Mercado Pago webhook secret is the built-in sandbox one: set \
                     [mercadopago] webhook_secret (AUTOFACTURA__MERCADOPAGO__WEBHOOK_SECRET) to your \
                     application's secret"
                ));
            }
            if self.uses_mp_stand_in() {
                p.push(format!(
                    "{why}, and without [mercadopago] access_token Mercado Pago payments would be read \
                     from the built-in stand-in, which calls every payment approved: set \
                     [mercadopago] access_token (AUTOFACTURA__MERCADOPAGO__ACCESS_TOKEN)"
                ));
            }
        }
        let key = if self.separate_admin_listener() {
            "[admin] listen"
        } else {
            "[server] listen (which also serves the admin)"
        };
        if let Some(why) = self.exposed(self.admin_listen(), key)
            && self
                .admin
                .password
                .as_ref()
                .is_some_and(|s| s.expose() == EXAMPLE_ADMIN_PASSWORD)
        {
            p.push(format!(
                "{why}, and [admin] password is the example {EXAMPLE_ADMIN_PASSWORD:?}: set \
                 [admin] password (AUTOFACTURA__ADMIN__PASSWORD) or password_hash (an argon2 PHC \
                 string) to one of your own"
            ));
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p))
        }
    }

    /// Whether the Stripe secrets include the built-in sandbox one.
    pub(super) fn uses_sandbox_stripe_secret(&self) -> bool {
        let sandbox = |s: &SecretString| s.expose() == SANDBOX_STRIPE_SECRET;
        self.stripe.webhook_secrets.iter().any(sandbox)
    }

    /// Whether the Mercado Pago secret is the built-in sandbox one.
    pub(super) fn uses_sandbox_mp_secret(&self) -> bool {
        let sandbox = |s: &SecretString| s.expose() == SANDBOX_MP_SECRET;
        self.mercadopago
            .webhook_secret
            .as_ref()
            .is_some_and(sandbox)
    }

    /// Why `listen` is reachable from beyond this machine, if it is: not a loopback address,
    /// or requests arrive through a reverse proxy (`trusted_proxies` is set).
    fn exposed(&self, listen: &str, key: &str) -> Option<String> {
        if !crate::proxy::is_loopback(listen) {
            Some(format!(
                "{key} = {listen:?} is reachable from beyond this machine"
            ))
        } else if !self.server.trusted_proxies.is_empty() {
            Some(format!(
                "{key} is loopback, but [server] trusted_proxies is set: a proxy forwards \
                 requests from beyond this machine"
            ))
        } else {
            None
        }
    }
}
