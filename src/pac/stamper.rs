//! The PAC as the worker's [`Authority`]: a stamp call under the row's stamp key, its
//! [`StampOutcome`] kept for the attempt log and read as one of the four [`Verdict`]s.

use super::{AttemptLog, PacClient, Route, Stamp, StampOutcome};
use crate::domain::{Authority, StampKey, Verdict};

/// One PAC client with the durable memory of where each key was sent (a failover pair sends
/// a key only where `log` allows; a single PAC ignores it).
pub struct Stamper<'a> {
    pub client: &'a PacClient,
    pub log: &'a dyn AttemptLog,
}

impl Authority for Stamper<'_> {
    type Document = [u8];
    type Key = StampKey;
    type Issued<'a> = &'a Stamp;
    /// Which PAC of a failover pair answered (`None`: a single PAC), and what it said.
    type Answer = (Option<Route>, StampOutcome);

    async fn issue(&self, key: &StampKey, sealed: &[u8]) -> Self::Answer {
        match self.client {
            PacClient::Failover(f) => {
                let (route, out) = f.stamp_logged(sealed, key, self.log).await;
                (Some(route), out)
            }
            single => (None, single.stamp(sealed, key).await),
        }
    }

    fn verdict((_, out): &Self::Answer) -> Verdict<&Stamp> {
        match out {
            StampOutcome::Stamped(stamp) => Verdict::Issued {
                document: stamp,
                recovered: false,
            },
            StampOutcome::AlreadyStamped {
                stamp,
                same_content: true,
            } => Verdict::Issued {
                document: stamp,
                recovered: true,
            },
            // The stamp is real but of other bytes: never this document's.
            StampOutcome::AlreadyStamped {
                stamp,
                same_content: false,
            } => Verdict::Rejected {
                code: "CFDI3307".to_owned(),
                message: format!(
                    "the stamp key was already used for another document (UUID {}); reconcile before retrying",
                    stamp.uuid
                ),
            },
            StampOutcome::Rejected { code, message } => Verdict::Rejected {
                code: code.clone(),
                message: message.clone(),
            },
            StampOutcome::Retryable {
                reason,
                retry_after,
                ..
            } => Verdict::Retryable {
                reason: reason.clone(),
                after: *retry_after,
            },
            StampOutcome::Unknown { reason, .. } => Verdict::Unknown {
                reason: reason.clone(),
            },
        }
    }
}
