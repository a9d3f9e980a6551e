//! The customer's email against a real SMTP server on 127.0.0.1 (tests/it/support/smtp.rs):
//! one message with both attachments, the XML byte for byte, a stable Message-ID, a 550 told
//! apart from a server that is down.

use autofactura::cfdi::dom::Element;
use autofactura::deliver::{Event, MailError, Mailer, Sender, message, message_id};
use autofactura::pdf::{self, PdfOptions};

use crate::pdf::{sample, stamped};
use crate::support::smtp::{Smtp, attachment};

fn sender() -> Sender {
    Sender {
        from: "Facturas <facturas@example.mx>".parse().expect("from"),
        reply_to: Some("contabilidad@example.mx".parse().expect("reply-to")),
        bcc: Some("archivo@example.mx".parse().expect("bcc")),
    }
}

fn mailer(addr: &str) -> Mailer {
    Mailer::from_url(&format!("smtp://{addr}"), std::time::Duration::from_secs(5)).expect("mailer")
}

#[tokio::test]
async fn a_stamped_cfdi_goes_out_as_one_message_with_its_xml_and_pdf() {
    let smtp = Smtp::start().await;
    let xml = stamped(&sample("02-lines-with-discount"));
    let uuid = autofactura::cfdi::Tfd::from_comprobante(&Element::parse(&xml).expect("xml"))
        .expect("tfd")
        .uuid;
    let m = message(
        &sender(),
        "cliente@example.org",
        &xml,
        Event::Stamped,
        &PdfOptions::default(),
    )
    .expect("message");
    let reply = mailer(&smtp.addr).send(m).await.expect("sent");
    assert!(reply.contains("queued"), "{reply}");
    let got = smtp.messages();
    assert_eq!(got.len(), 1, "exactly one message");
    let rcpt = got[0].rcpt.join(" ");
    assert!(
        rcpt.contains("cliente@example.org") && rcpt.contains("archivo@example.mx"),
        "{rcpt}"
    );
    let data = &got[0].data;
    let text = String::from_utf8_lossy(data);
    let mid = message_id(&uuid, Event::Stamped, "example.mx");
    assert!(text.contains(&format!("Message-ID: {mid}")), "{text}");
    assert!(text.contains("Reply-To: contabilidad@example.mx"), "{text}");
    assert!(
        !text.contains("archivo@example.mx"),
        "the Bcc is not in the headers"
    );
    let stem = format!("EKU9003173C9_A102_{uuid}");
    let xml_got = attachment(data, &format!("{stem}.xml")).expect("XML attached");
    assert_eq!(
        xml_got, xml,
        "the XML attachment is the stamped XML byte for byte"
    );
    let pdf_got = attachment(data, &format!("{stem}.pdf")).expect("PDF attached");
    assert_eq!(
        pdf_got,
        pdf::render(&xml, &PdfOptions::default()).expect("render")
    );
    // The same document and event give the same Message-ID, whatever else changes.
    let again = message(
        &sender(),
        "otra@example.org",
        &xml,
        Event::Stamped,
        &PdfOptions::default(),
    )
    .expect("message");
    let headers = String::from_utf8_lossy(&again.formatted()).into_owned();
    assert!(headers.contains(&format!("Message-ID: {mid}")));
    let canceled = message(
        &sender(),
        "otra@example.org",
        &xml,
        Event::Canceled,
        &PdfOptions::default(),
    )
    .expect("message");
    let canceled = String::from_utf8_lossy(&canceled.formatted()).into_owned();
    assert!(
        !canceled.contains(&format!("Message-ID: {mid}")),
        "another event, another message"
    );
}

#[tokio::test]
async fn a_550_is_permanent_and_a_server_that_is_down_is_not() {
    let smtp = Smtp::start().await;
    smtp.reject.store(true, std::sync::atomic::Ordering::SeqCst);
    let xml = stamped(&sample("01-iva16-mxn"));
    let m = || {
        message(
            &sender(),
            "nadie@example.mx",
            &xml,
            Event::Stamped,
            &PdfOptions::default(),
        )
        .expect("message")
    };
    match mailer(&smtp.addr).send(m()).await {
        Err(MailError::Permanent(reply)) => assert!(reply.contains("550"), "{reply}"),
        other => panic!("expected a permanent rejection, got {other:?}"),
    }
    assert!(smtp.messages().is_empty());
    // A port that refuses: the server is down, try again later.
    let (_down, addr) = crate::support::refusing_port();
    match mailer(&addr).send(m()).await {
        Err(MailError::Transient(_)) => {}
        other => panic!("expected a transient failure, got {other:?}"),
    }
}
