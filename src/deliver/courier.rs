//! The courier: drains the delivery outbox (`deliveries`) over SMTP. Each due row is claimed
//! with a lease, its message built from the stored stamped XML under the row's Message-ID,
//! sent, and settled: `sent` with the server's reply, `bounced` on a permanent rejection (5xx)
//! with the reply, `retry` with backoff on a transient failure, `failed` when the schedule has
//! run out. No transaction is held while the server is talked to.

use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Event, MailError, Mailer, Sender, message_as};
use crate::config::EmailSettings;
use crate::domain::ArcaVoucherState;
use crate::pdf::PdfOptions;
use crate::store::{ClaimedDelivery, Db, DeliveryOutcome, StoreError};

/// What the courier needs: the database, the SMTP transport, the sender, how PDFs are printed.
#[derive(Debug, Clone)]
pub struct Courier {
    db: Db,
    mailer: Mailer,
    sender: Sender,
    pdf: PdfOptions,
    /// Delays between attempts after transient failures (`[email] retry_seconds`).
    retry: Vec<Duration>,
    /// How long a claim lasts: longer than a send can take, so only a dead courier's row is
    /// taken again (and then sent under the same Message-ID).
    lease: chrono::Duration,
    /// How often to look for due deliveries when idle.
    pub idle_poll: Duration,
    /// `[arca]`, what an ARCA voucher's PDF prints (the emisor), when it is on.
    arca: Option<crate::config::ArcaSettings>,
}

impl Courier {
    /// `None` when `[email] smtp_url` is not set (email off).
    pub fn from_settings(
        db: Db,
        s: &EmailSettings,
        pdf: PdfOptions,
    ) -> anyhow::Result<Option<Courier>> {
        let (Some(url), Some(from)) = (&s.smtp_url, &s.from) else {
            return Ok(None);
        };
        let parse =
            |key: &str, v: &str| v.parse().map_err(|e| anyhow::anyhow!("[email] {key}: {e}"));
        let sender = Sender {
            from: parse("from", from)?,
            reply_to: s
                .reply_to
                .as_deref()
                .map(|v| parse("reply_to", v))
                .transpose()?,
            bcc: s.bcc.as_deref().map(|v| parse("bcc", v)).transpose()?,
        };
        let timeout = Duration::from_secs(s.timeout_seconds.max(1));
        let mailer = Mailer::from_url(url.expose(), timeout)?;
        // Each of a conversation's steps (greeting, EHLO, MAIL, RCPTs, DATA, the data, QUIT)
        // may take up to the timeout.
        let lease = chrono::Duration::from_std(timeout * 8).unwrap_or_default()
            + chrono::Duration::seconds(5);
        Ok(Some(Courier {
            db,
            mailer,
            sender,
            pdf,
            retry: s
                .retry_seconds
                .iter()
                .map(|n| Duration::from_secs(*n))
                .collect(),
            lease,
            idle_poll: Duration::from_millis(500),
            arca: None,
        }))
    }

    /// Also sends the emails of authorized ARCA vouchers, printed per `[arca]` (when on).
    pub fn with_arca(mut self, arca: &crate::config::ArcaSettings) -> Courier {
        self.arca = arca.enabled.then(|| arca.clone());
        self
    }

    /// Delivers due messages until `token` is cancelled; a send under way is finished first
    /// (bounded by `[email] timeout_seconds`).
    pub async fn run(self, token: CancellationToken) {
        info!(from = %self.sender.from, "email: courier started");
        crate::shutdown::drain_until_cancelled(token, self.idle_poll, "email", || {
            self.deliver_next()
        })
        .await;
    }

    /// One due delivery; `false` when none was due.
    pub async fn deliver_next(&self) -> Result<bool, StoreError> {
        // One claim id per claim: only this claim may settle the row.
        let owner = format!("courier-{:016x}", rand::random::<u64>());
        let Some(d) = self
            .db
            .claim_delivery(Utc::now(), self.lease, &owner)
            .await?
        else {
            return Ok(false);
        };
        let (outcome, reply) = self.send(&d).await?;
        crate::metrics::email(outcome.state().as_str());
        if !self
            .db
            .settle_delivery(d.id, &owner, outcome, &reply)
            .await?
        {
            warn!(
                delivery = d.id,
                "email: claim lost before settling; another courier took the row"
            );
        }
        Ok(true)
    }

    /// Builds and sends `d`'s message: how it ended and the server's reply (or why not).
    async fn send(&self, d: &ClaimedDelivery) -> Result<(DeliveryOutcome, String), StoreError> {
        let stamped = match (d.outbox_id, &d.arca_key) {
            (Some(id), _) => self.db.stamped_document(id).await?,
            (None, Some(key)) => return self.send_voucher(d, key).await,
            (None, None) => None,
        };
        let Some((uuid, xml)) = stamped else {
            let why = "the document has no stamped XML".to_owned();
            warn!(delivery = d.id, recipient = %d.recipient, "email: {why}");
            return Ok((DeliveryOutcome::Bounced, why));
        };
        let event = Event::parse(&d.event).unwrap_or(Event::Stamped);
        let built = message_as(
            &self.sender,
            &d.recipient,
            &xml,
            event,
            &self.pdf,
            Some(&d.message_id),
        );
        Ok(self.sent(d, &uuid, built).await)
    }

    /// Builds and sends the email of the authorized ARCA voucher `key`.
    async fn send_voucher(
        &self,
        d: &ClaimedDelivery,
        key: &str,
    ) -> Result<(DeliveryOutcome, String), StoreError> {
        let voucher = self.db.arca_voucher(key).await?;
        let printed = match (voucher, &self.arca) {
            (Some(v), Some(cfg)) if v.state == ArcaVoucherState::Authorized => {
                crate::arca::print::printable(&v, cfg)
                    .map_err(|e| MailError::Build(format!("{e:#}")))
            }
            (Some(v), Some(_)) => Err(MailError::Build(format!("the voucher is {}", v.state))),
            (None, _) => Err(MailError::Build(format!("no ARCA voucher under {key}"))),
            (_, None) => Err(MailError::Build("[arca] is off".into())),
        };
        let built = printed.and_then(|p| {
            super::voucher_message(&self.sender, &d.recipient, &p, &self.pdf, &d.message_id)
        });
        Ok(self.sent(d, key, built).await)
    }

    /// Sends `built` (the message of document `uuid`, or why it could not be made): how it
    /// ended and the server's reply.
    async fn sent(
        &self,
        d: &ClaimedDelivery,
        uuid: &str,
        built: Result<lettre::Message, MailError>,
    ) -> (DeliveryOutcome, String) {
        let (recipient, attempt) = (&d.recipient, d.attempts);
        let sent = match built {
            Ok(m) => self.mailer.send(m).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(reply) => {
                info!(%uuid, %recipient, attempt, message_id = %d.message_id, %reply, "email: invoice sent");
                (DeliveryOutcome::Sent, reply)
            }
            Err(e @ (MailError::Permanent(_) | MailError::Build(_))) => {
                warn!(%uuid, %recipient, attempt, error = %e, "email: invoice bounced");
                (DeliveryOutcome::Bounced, e.to_string())
            }
            Err(e) => {
                let done = usize::try_from(attempt).unwrap_or(usize::MAX);
                match self.retry.get(done.saturating_sub(1)) {
                    Some(delay) => {
                        let jitter = delay.mul_f64(rand::random_range(0.9..1.1));
                        let at =
                            Utc::now() + chrono::Duration::from_std(jitter).unwrap_or_default();
                        warn!(%uuid, %recipient, attempt, error = %e, retry_at = %at, "email: invoice not sent, will retry");
                        (DeliveryOutcome::Retry(at), e.to_string())
                    }
                    None => {
                        warn!(%uuid, %recipient, attempt, error = %e, "email: invoice not sent, given up");
                        (DeliveryOutcome::Failed, e.to_string())
                    }
                }
            }
        }
    }
}
