//! The customers' mailbox of a chaos run: an SMTP server on 127.0.0.1 that takes every message
//! the instances' couriers send (they are killed mid-conversation too), and the check that
//! every stamped document with a customer address reached it under exactly one Message-ID.
//! A message taken twice under the same Message-ID (a courier killed between the server's
//! acceptance and its write) is one message, as a mail client shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::domain::DeliveryState;
use crate::store::Db;

/// The server: the Message-IDs it accepted, in order (repeats kept).
pub struct Mailbox {
    pub port: u16,
    accepted: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Mailbox {
    pub async fn start() -> anyhow::Result<Mailbox> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let store = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(converse(stream, store.clone()));
            }
        });
        Ok(Mailbox {
            port,
            accepted,
            task,
        })
    }

    fn accepted(&self) -> Vec<String> {
        self.accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One SMTP session (no TLS, no AUTH: what `smtp://127.0.0.1:port` speaks). A connection that
/// ends mid-message (a killed courier) records nothing.
async fn converse(stream: TcpStream, accepted: Arc<Mutex<Vec<String>>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    if write
        .write_all(b"220 chaos mailbox ESMTP\r\n")
        .await
        .is_err()
    {
        return;
    }
    while let Ok(Some(line)) = lines.next_line().await {
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" | "HELO" => b"250 chaos mailbox\r\n",
            "DATA" => {
                if write.write_all(b"354 go on\r\n").await.is_err() {
                    return;
                }
                let mut id = None;
                loop {
                    match lines.next_line().await {
                        Ok(Some(l)) if l == "." => break,
                        Ok(Some(l)) => {
                            if id.is_none()
                                && l.len() > 11
                                && l[..11].eq_ignore_ascii_case("message-id:")
                            {
                                id = Some(l[11..].trim().to_owned());
                            }
                        }
                        _ => return,
                    }
                }
                accepted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(id.unwrap_or_default());
                b"250 accepted\r\n"
            }
            "QUIT" => {
                let _ = write.write_all(b"221 bye\r\n").await;
                return;
            }
            _ => b"250 ok\r\n",
        };
        if write.write_all(reply).await.is_err() {
            return;
        }
    }
}

/// What the mailbox check found: documents that should have mailed their customer, those that
/// did exactly once, and one line per problem.
#[derive(Debug, Default)]
pub struct Mailed {
    pub expected: usize,
    pub mailed: usize,
    pub problems: Vec<String>,
}

/// Every stamped document with a customer address has its `stamped` message sent, and the
/// mailbox holds exactly one Message-ID of that document's stamp (however many times taken).
pub async fn check(db: &Db, mailbox: &Mailbox) -> anyhow::Result<Mailed> {
    let accepted = mailbox.accepted();
    let mut ids_of: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for id in &accepted {
        // `<cfdi-{uuid}-stamped@domain>`: the UUID (lowercase there) is the document.
        if let Some(uuid) = id
            .strip_prefix("<cfdi-")
            .and_then(|rest| rest.split_once("-stamped"))
            .map(|(uuid, _)| uuid.to_uppercase())
        {
            ids_of.entry(uuid).or_default().insert(id);
        }
    }
    let mut m = Mailed::default();
    for (uuid, message_id, state) in db.stamped_mail_audit().await? {
        m.expected += 1;
        let Some(message_id) = message_id else {
            m.problems.push(format!(
                "email: stamped {uuid} has a customer address but no message"
            ));
            continue;
        };
        let ids = ids_of
            .get(&uuid.to_uppercase())
            .cloned()
            .unwrap_or_default();
        if state != Some(DeliveryState::Sent) {
            let state = state.map_or("missing", DeliveryState::as_str);
            m.problems.push(format!(
                "email: {message_id} of {uuid} is {state}, not sent"
            ));
        } else if ids.len() != 1 || !ids.contains(message_id.as_str()) {
            m.problems.push(format!(
                "email: {uuid} reached the mailbox as {ids:?}, expected exactly {message_id}"
            ));
        } else {
            m.mailed += 1;
        }
    }
    Ok(m)
}
