//! A small SMTP server on 127.0.0.1:0 speaking real SMTP over TCP (RFC 5321's commands, dot
//! stuffing), keeping what it accepted; it can refuse recipients with a 550.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub rcpt: Vec<String>,
    pub data: Vec<u8>,
}

#[derive(Clone)]
pub struct Smtp {
    pub addr: String,
    pub got: Arc<Mutex<Vec<Received>>>,
    /// Answer every RCPT TO with `550 5.1.1` (a mailbox that does not exist).
    pub reject: Arc<AtomicBool>,
    /// Take the message, then never answer QUIT: the client is caught between the server's
    /// acceptance and whatever it does next.
    pub hold_quit: Arc<AtomicBool>,
}

impl Smtp {
    pub async fn start() -> Smtp {
        Smtp::start_on("127.0.0.1:0").await
    }

    /// A server on `addr` (a port a test chose while nothing listened on it: the server that
    /// comes up after being down).
    pub async fn start_on(addr: &str) -> Smtp {
        let listener = TcpListener::bind(addr).await.expect("bind smtp");
        let smtp = Smtp {
            addr: listener.local_addr().expect("addr").to_string(),
            got: Arc::default(),
            reject: Arc::default(),
            hold_quit: Arc::default(),
        };
        let s = smtp.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = s.session(sock).await;
                });
            }
        });
        smtp
    }

    pub fn messages(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    async fn session(&self, sock: tokio::net::TcpStream) -> std::io::Result<()> {
        let (r, mut w) = sock.into_split();
        let mut r = BufReader::new(r);
        w.write_all(b"220 test.local ESMTP\r\n").await?;
        let (mut from, mut rcpt) = (String::new(), Vec::new());
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let cmd = line.trim_end().to_owned();
            let verb = cmd
                .split([' ', ':'])
                .next()
                .unwrap_or("")
                .to_ascii_uppercase();
            let reply: &[u8] = match verb.as_str() {
                "EHLO" => b"250-test.local\r\n250 8BITMIME\r\n",
                "HELO" | "NOOP" => b"250 OK\r\n",
                "RSET" => {
                    (from, rcpt) = (String::new(), Vec::new());
                    b"250 OK\r\n"
                }
                "MAIL" => {
                    from = cmd;
                    b"250 2.1.0 OK\r\n"
                }
                "RCPT" if self.reject.load(Ordering::SeqCst) => {
                    b"550 5.1.1 <nadie@example.mx>: mailbox unavailable\r\n"
                }
                "RCPT" => {
                    rcpt.push(cmd);
                    b"250 2.1.5 OK\r\n"
                }
                "DATA" => {
                    w.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
                    let mut data = Vec::new();
                    loop {
                        let mut l = Vec::new();
                        if r.read_until(b'\n', &mut l).await? == 0 {
                            return Ok(());
                        }
                        if l == b".\r\n" {
                            break;
                        }
                        // Dot stuffing: a line starting with a dot had one added.
                        let l = l.strip_prefix(b".").unwrap_or(&l);
                        data.extend_from_slice(l);
                    }
                    self.got.lock().expect("lock").push(Received {
                        from: std::mem::take(&mut from),
                        rcpt: std::mem::take(&mut rcpt),
                        data,
                    });
                    b"250 2.0.0 queued\r\n"
                }
                "QUIT" if self.hold_quit.load(Ordering::SeqCst) => {
                    // Until the client goes away.
                    let _ = r.read_line(&mut line).await;
                    return Ok(());
                }
                "QUIT" => {
                    w.write_all(b"221 2.0.0 bye\r\n").await?;
                    return Ok(());
                }
                _ => b"502 5.5.2 command not recognized\r\n",
            };
            w.write_all(reply).await?;
        }
    }
}

/// The file name of a MIME part's headers: `filename="…"`, or RFC 2231's continuations
/// `filename*0="…"; filename*1="…"` joined (lettre writes those).
fn file_name(headers: &str) -> String {
    headers
        .split(['\n', ';'])
        .map(str::trim)
        .filter(|p| p.starts_with("filename"))
        .filter_map(|p| {
            p.split_once('=')
                .map(|(_, v)| v.trim_matches('"').to_owned())
        })
        .collect()
}

/// The attachment named `name` of a MIME message, decoded from base64 or, when lettre chose it
/// (a text file of mostly ASCII, such as a REP's XML), quoted-printable.
pub fn attachment(data: &[u8], name: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = String::from_utf8_lossy(data);
    let (headers, body) = text
        .split("\r\n--")
        .filter_map(|p| p.split_once("\r\n\r\n"))
        .find(|(headers, _)| file_name(headers) == name)?;
    let lines: Vec<&str> = body.lines().take_while(|l| !l.starts_with("--")).collect();
    if headers.contains("quoted-printable") {
        return quoted_printable(&lines.join("\r\n"));
    }
    base64::engine::general_purpose::STANDARD
        .decode(lines.concat().trim())
        .ok()
}

/// RFC 2045 quoted-printable: `=` at a line's end joins it to the next, `=XX` is a byte.
fn quoted_printable(text: &str) -> Option<Vec<u8>> {
    let joined = text.trim_end().replace("=\r\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}
