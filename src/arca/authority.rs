//! ARCA as an [`Authority`]: [`Issuer::issue_sale`] under a sale's key (the batch of one; the
//! drain sends a sequence's sales together with [`Issuer::issue_sales`]), and every outcome
//! read as one of the four [`Verdict`]s the worker acts on.

use super::model::{Cae, VoucherInput};
use super::{IssueError, Issuer, Outcome};
use crate::domain::{Authority, Verdict};

impl Authority for Issuer {
    type Document = VoucherInput;
    type Key = str;
    /// The voucher's number and its CAE.
    type Issued<'a> = (i64, &'a Cae);
    type Answer = Result<Outcome, IssueError>;

    async fn issue(&self, key: &str, input: &VoucherInput) -> Self::Answer {
        self.issue_sale(key, input).await
    }

    fn verdict(answer: &Self::Answer) -> Verdict<(i64, &Cae)> {
        let rejected = |code: String, message: String| Verdict::Rejected { code, message };
        match answer {
            Ok(Outcome::Authorized {
                number,
                cae,
                recovered,
            }) => Verdict::Issued {
                document: (*number, cae),
                recovered: *recovered,
            },
            Ok(Outcome::Rejected { errors, .. }) => rejected(
                errors
                    .first()
                    .map_or_else(String::new, |e| e.code.to_string()),
                format!(
                    "refused: {}",
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ),
            // Not ours at our number: a human decides (the admin's re-issue).
            Ok(Outcome::Conflict { number, detail }) => rejected(
                "conflict".to_owned(),
                format!("another voucher holds number {number}: {detail}"),
            ),
            // Sent, and not known yet: resolved by its number, never by a new one.
            Ok(Outcome::Indeterminate { reason, .. }) => Verdict::Unknown {
                reason: reason.clone(),
            },
            // Nothing was reserved or sent.
            Ok(Outcome::Blocked { by, reason, .. }) => Verdict::Retryable {
                reason: format!("the sequence waits for {by}: {reason}"),
                after: None,
            },
            Ok(Outcome::Busy) => Verdict::Retryable {
                reason: "another instance is on the sequence".to_owned(),
                after: None,
            },
            Err(e @ IssueError::Mismatch(_)) => {
                rejected("ARCA_INPUT_IDEMPOTENCY_MISMATCH".to_owned(), e.to_string())
            }
            Err(e @ IssueError::Invalid(_)) => rejected("invalid".to_owned(), e.to_string()),
            // The database or ARCA's next number could not be had: nothing was sent.
            Err(
                e @ (IssueError::Store(_) | IssueError::Unavailable(_) | IssueError::Corrupt(..)),
            ) => Verdict::Retryable {
                reason: e.to_string(),
                after: None,
            },
        }
    }
}
