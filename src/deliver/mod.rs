//! Email to the customer: the message of a stamped CFDI (Spanish subject and body, the XML and
//! the PDF attached under their conventional names, a Message-ID derived from the document) and
//! its sending over SMTP (`[email]`, through lettre on tokio with the system's TLS, as reqwest).
//!
//! The delivery outbox (`deliveries`, see `store::deliveries`) gets a row in the write that
//! records a stamp when email is on and the customer gave an address; the [`courier`] drains
//! it: retries with backoff on a transient failure, `bounced` on a permanent one (5xx, which
//! [`Mailer::send`] tells apart).
//!
//! Who may import it: `startup` (to run the [`courier::Courier`]) and tests. It uses
//! `[email]`, the store, the PDF and the document engine's XML tree, and for Argentina the
//! printable ARCA voucher ([`crate::arca::print`]); the Message-ID and the
//! events live in [`crate::domain::delivery`], shared with the store.
//!
//! - `mod.rs`: the message ([`message`], [`message_as`]; an ARCA voucher's,
//!   [`voucher_message`]) and SMTP ([`Mailer`]).
//! - [`courier`]: the loop that drains the delivery outbox.

pub mod courier;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::cfdi::dom::{Element, NS_CFDI, NS_PAGOS20};
use crate::pdf::{self, PdfOptions};

pub use crate::domain::delivery::{Event, message_id, resent_message_id};

/// Where messages come from (`[email]`).
#[derive(Debug, Clone)]
pub struct Sender {
    pub from: Mailbox,
    pub reply_to: Option<Mailbox>,
    pub bcc: Option<Mailbox>,
}

/// Why a message could not be made or sent.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("the message cannot be built: {0}")]
    Build(String),
    /// The server refused it for good (5xx): the delivery ends `bounced` with this reply.
    #[error("rejected by the mail server: {0}")]
    Permanent(String),
    /// Try again later (connection refused, timeout, 4xx).
    #[error("the mail server did not take it: {0}")]
    Transient(String),
}

/// The message for `to` about the stamped CFDI `xml` (attached, with its PDF), under its
/// first Message-ID ([`message_id`]).
pub fn message(
    sender: &Sender,
    to: &str,
    xml: &[u8],
    event: Event,
    opts: &PdfOptions,
) -> Result<Message, MailError> {
    message_as(sender, to, xml, event, opts, None)
}

/// [`message`] under `message_id` when given (a delivery's stored id, a resend's own).
pub fn message_as(
    sender: &Sender,
    to: &str,
    xml: &[u8],
    event: Event,
    opts: &PdfOptions,
    message_id: Option<&str>,
) -> Result<Message, MailError> {
    let bad = |e: &dyn std::fmt::Display| MailError::Build(e.to_string());
    let root = Element::parse(xml).map_err(|e| bad(&e))?;
    let tfd = crate::cfdi::Tfd::from_comprobante(&root)
        .ok_or_else(|| MailError::Build("the CFDI is not stamped".into()))?;
    let emisor = root
        .child_attr(NS_CFDI, "Emisor", "Nombre")
        .unwrap_or_default()
        .to_owned();
    let serie_folio = match (root.attr("Serie"), root.attr("Folio")) {
        (Some(s), Some(f)) => format!("{s}-{f}"),
        (s, f) => format!("{}{}", s.unwrap_or_default(), f.unwrap_or_default()),
    };
    // A REP's own Total is 0 XXX: what it stands for is the payment it receipts.
    let pago = root
        .child(NS_CFDI, "Complemento")
        .and_then(|c| c.child(NS_PAGOS20, "Pagos"))
        .and_then(|p| p.child(NS_PAGOS20, "Pago"));
    let total = match pago {
        Some(p) => format!(
            "{} {}",
            p.attr("Monto").unwrap_or_default(),
            p.attr("MonedaP").unwrap_or_default()
        ),
        None => format!(
            "{} {}",
            root.attr("Total").unwrap_or_default(),
            root.attr("Moneda").unwrap_or_default()
        ),
    };
    let documento = match root.attr("TipoDeComprobante") {
        Some("E") => "nota de crédito",
        Some("P") => "recibo electrónico de pago",
        _ => "factura",
    };
    let (subject, body) = match event {
        Event::Stamped => (
            format!("Su {documento} {serie_folio} de {emisor}"),
            format!(
                "Estimado cliente:\n\n{emisor} le envía su {documento} {serie_folio} por un total de \
                 {total}.\n\nFolio fiscal (UUID): {}\n\nAdjuntamos el XML, que es su comprobante \
                 fiscal, y su representación impresa en PDF. Puede verificarlo en el portal del SAT \
                 con el código QR del PDF.\n\nSaludos,\n{emisor}\n",
                tfd.uuid
            ),
        ),
        Event::Canceled => (
            format!("Cancelación de su {documento} {serie_folio} de {emisor}"),
            format!(
                "Estimado cliente:\n\n{emisor} canceló ante el SAT su {documento} {serie_folio} por \
                 un total de {total}.\n\nFolio fiscal (UUID): {}\n\nAdjuntamos el XML y el PDF del \
                 comprobante cancelado para sus registros.\n\nSaludos,\n{emisor}\n",
                tfd.uuid
            ),
        ),
    };
    let pdf_bytes = pdf::render(xml, opts).map_err(|e| bad(&e))?;
    let xml_name = pdf::file_name(xml, "xml").map_err(|e| bad(&e))?;
    let pdf_name = pdf::file_name(xml, "pdf").map_err(|e| bad(&e))?;
    let domain = sender.from.email.domain().to_owned();
    let to: Mailbox = to.parse().map_err(|e| bad(&e))?;
    let mut b = Message::builder()
        .from(sender.from.clone())
        .to(to)
        .subject(subject)
        .message_id(Some(match message_id {
            Some(id) => id.to_owned(),
            None => self::message_id(&tfd.uuid, event, &domain),
        }));
    if let Some(r) = &sender.reply_to {
        b = b.reply_to(r.clone());
    }
    if let Some(bcc) = &sender.bcc {
        b = b.bcc(bcc.clone());
    }
    let xml_type = ContentType::parse("application/xml").map_err(|e| bad(&e))?;
    let pdf_type = ContentType::parse("application/pdf").map_err(|e| bad(&e))?;
    b.multipart(
        MultiPart::mixed()
            .singlepart(SinglePart::plain(body))
            .singlepart(Attachment::new(xml_name).body(xml.to_vec(), xml_type))
            .singlepart(Attachment::new(pdf_name).body(pdf_bytes, pdf_type)),
    )
    .map_err(|e| bad(&e))
}

/// The message for `to` with the PDF of an authorized ARCA voucher `v` (Argentina: the PDF
/// with ARCA's QR is what the buyer keeps; there is no XML to attach), under `message_id`.
pub fn voucher_message(
    sender: &Sender,
    to: &str,
    v: &crate::pdf::voucher::VoucherPrint,
    opts: &PdfOptions,
    message_id: &str,
) -> Result<Message, MailError> {
    let bad = |e: &dyn std::fmt::Display| MailError::Build(e.to_string());
    let emisor = v.emisor.first().cloned().unwrap_or_default();
    let documento = format!("{} {} {}", v.titulo.to_lowercase(), v.letra, v.numero);
    let total = v.totales.last().map(|t| t.1.clone()).unwrap_or_default();
    let subject = format!("Su {documento} de {emisor}");
    let body = format!(
        "Estimado cliente:\n\n{emisor} le envía su {documento} por un total de {total}.\n\n\
         CAE: {} (vence el {})\n\nAdjuntamos el comprobante en PDF. Puede verificarlo en ARCA \
         con el código QR del PDF.\n\nSaludos,\n{emisor}\n",
        v.cae, v.cae_vto
    );
    let pdf_bytes = crate::pdf::voucher::render_voucher(v, opts);
    let name = format!("ARCA_{:03}_{}.pdf", v.codigo, v.numero);
    let to: Mailbox = to.parse().map_err(|e| bad(&e))?;
    let mut b = Message::builder()
        .from(sender.from.clone())
        .to(to)
        .subject(subject)
        .message_id(Some(message_id.to_owned()));
    if let Some(r) = &sender.reply_to {
        b = b.reply_to(r.clone());
    }
    if let Some(bcc) = &sender.bcc {
        b = b.bcc(bcc.clone());
    }
    let pdf_type = ContentType::parse("application/pdf").map_err(|e| bad(&e))?;
    b.multipart(
        MultiPart::mixed()
            .singlepart(SinglePart::plain(body))
            .singlepart(Attachment::new(name).body(pdf_bytes, pdf_type)),
    )
    .map_err(|e| bad(&e))
}

/// An SMTP connection setting: `smtp://[user:pass@]host[:port]?tls=required` (STARTTLS, port
/// 587 by default), `smtps://…` (implicit TLS, 465), or plain `smtp://host:port` (no TLS).
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer").finish_non_exhaustive()
    }
}

impl Mailer {
    pub fn from_url(url: &str, timeout: std::time::Duration) -> Result<Mailer, MailError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| MailError::Build(format!("[email] smtp_url: {e}")))?
            .timeout(Some(timeout))
            .build();
        Ok(Mailer { transport })
    }

    /// Sends `m`; the server's reply when it took it.
    pub async fn send(&self, m: Message) -> Result<String, MailError> {
        match self.transport.send(m).await {
            Ok(r) => Ok(r.message().collect::<Vec<_>>().join(" ")),
            Err(e) if e.is_permanent() => Err(MailError::Permanent(e.to_string())),
            Err(e) => Err(MailError::Transient(e.to_string())),
        }
    }
}
