//! The customer's email of a document, as the delivery outbox and the courier both need it:
//! which event a message is about, and its Message-ID, derived from the document so that a
//! message sent again (after a crash between the server's acceptance and our write) is the
//! same message, never another.

/// What a message says, by the event that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Stamped,
    Canceled,
}

impl Event {
    /// Its one spelling (the `deliveries.event` column and the Message-ID).
    pub fn tag(self) -> &'static str {
        match self {
            Event::Stamped => "stamped",
            Event::Canceled => "canceled",
        }
    }

    pub fn parse(s: &str) -> Option<Event> {
        match s {
            "stamped" => Some(Event::Stamped),
            "canceled" => Some(Event::Canceled),
            _ => None,
        }
    }
}

/// The stable Message-ID of `event` of the CFDI `uuid`, for the first message.
pub fn message_id(uuid: &str, event: Event, domain: &str) -> String {
    resent_message_id(uuid, event, 0, domain)
}

/// The Message-ID of the `resend`th message of `event` of `uuid` (0: the first, as
/// [`message_id`]): an admin's resend is a message of its own, retried under its own id.
pub fn resent_message_id(uuid: &str, event: Event, resend: i32, domain: &str) -> String {
    let uuid = uuid.to_ascii_lowercase();
    let tag = event.tag();
    match resend {
        0 => format!("<cfdi-{uuid}-{tag}@{domain}>"),
        n => format!("<cfdi-{uuid}-{tag}-r{n}@{domain}>"),
    }
}

/// The Message-ID of the email of an authorized ARCA voucher, from its coordinates (CUIT,
/// punto de venta, type, number): one voucher, one message, whatever repeats.
pub fn arca_message_id(
    cuit: i64,
    pto_vta: i32,
    cbte_tipo: i32,
    number: i64,
    domain: &str,
) -> String {
    format!("<arca-{cuit}-{pto_vta:05}-{cbte_tipo:03}-{number:08}@{domain}>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_id_depends_on_the_document_the_event_and_the_resend_only() {
        let u = "AB12CD34-0000-4000-8000-000000000001";
        assert_eq!(
            message_id(u, Event::Stamped, "example.mx"),
            "<cfdi-ab12cd34-0000-4000-8000-000000000001-stamped@example.mx>"
        );
        assert_eq!(
            message_id(u, Event::Stamped, "example.mx"),
            resent_message_id(&u.to_lowercase(), Event::Stamped, 0, "example.mx")
        );
        assert_ne!(
            resent_message_id(u, Event::Stamped, 1, "example.mx"),
            message_id(u, Event::Stamped, "example.mx")
        );
        assert_ne!(
            message_id(u, Event::Canceled, "example.mx"),
            message_id(u, Event::Stamped, "example.mx")
        );
        assert_eq!(Event::parse(Event::Canceled.tag()), Some(Event::Canceled));
    }
}
