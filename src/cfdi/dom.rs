//! A small namespace-aware element tree, enough to read any CFDI.
//!
//! The cadena original, the validator and `cfdi verify` all work on this tree parsed from the
//! XML bytes, never on the builder's model, so what we check is exactly what a PAC receives.

use quick_xml::XmlVersion;
use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;

pub const NS_CFDI: &str = "http://www.sat.gob.mx/cfd/4";
pub const NS_TFD: &str = "http://www.sat.gob.mx/TimbreFiscalDigital";
pub const NS_PAGOS20: &str = "http://www.sat.gob.mx/Pagos20";
pub const NS_XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// An element from its start tag: name, namespace and attributes, no children yet.
fn start_element(
    ns: Option<String>,
    e: &quick_xml::events::BytesStart<'_>,
) -> Result<Element, XmlError> {
    let mut el = Element {
        ns,
        name: e.local_name().as_ref().to_owned(),
        ..Element::default()
    };
    for attr in e.attributes() {
        let attr = attr.map_err(|e| XmlError(e.to_string()))?;
        let key = attr.key.0.to_owned();
        let value = attr
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|e| XmlError(format!("attribute {key}: {e}")))?
            .into_owned();
        el.attrs.push((key, value));
    }
    Ok(el)
}

/// A child of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Element(Element),
    Text(String),
}

/// One element: its namespace, local name, attributes (raw qualified names, normalized values)
/// and children in document order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Element {
    pub ns: Option<String>,
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Node>,
}

#[derive(Debug, thiserror::Error)]
#[error("malformed XML: {0}")]
pub struct XmlError(pub String);

impl Element {
    /// Parses a whole document and returns its root element.
    pub fn parse(bytes: &[u8]) -> Result<Element, XmlError> {
        let text = std::str::from_utf8(bytes).map_err(|e| XmlError(format!("not UTF-8: {e}")))?;
        let mut reader = NsReader::from_str(text);
        let mut stack: Vec<Element> = Vec::new();
        let mut root: Option<Element> = None;
        loop {
            let pos = reader.buffer_position();
            let (resolved, event) = reader
                .read_resolved_event()
                .map_err(|e| XmlError(format!("after byte {pos}: {e}")))?;
            let ns = match resolved {
                ResolveResult::Bound(ns) => Some(ns.0.to_owned()),
                ResolveResult::Unbound => None,
                ResolveResult::Unknown(p) => {
                    return Err(XmlError(format!("undeclared namespace prefix `{p}`")));
                }
            };
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let el = start_element(ns, e)?;
                    if matches!(event, Event::Start(_)) {
                        stack.push(el);
                    } else {
                        attach(&mut stack, &mut root, el)?;
                    }
                }
                Event::End(_) => {
                    let el = stack
                        .pop()
                        .ok_or_else(|| XmlError("unbalanced end tag".into()))?;
                    attach(&mut stack, &mut root, el)?;
                }
                Event::Text(t) => {
                    if let Some(parent) = stack.last_mut() {
                        push_text(parent, &t.xml_content(XmlVersion::Implicit1_0));
                    }
                }
                Event::CData(t) => {
                    if let Some(parent) = stack.last_mut() {
                        push_text(parent, &t);
                    }
                }
                Event::GeneralRef(r) => {
                    if let Some(parent) = stack.last_mut() {
                        let name: &str = &r;
                        let resolved = resolve_ref(name)
                            .ok_or_else(|| XmlError(format!("unknown entity &{name};")))?;
                        push_text(parent, &resolved);
                    }
                }
                Event::Eof => break,
                _ => {}
            }
        }
        if !stack.is_empty() {
            return Err(XmlError("document ends inside an element".into()));
        }
        root.ok_or_else(|| XmlError("no root element".into()))
    }

    /// The root element's own attributes, without reading the rest of the document: enough to
    /// compare a Sello or a Fecha without building the whole tree.
    pub fn parse_root(bytes: &[u8]) -> Result<Element, XmlError> {
        let text = std::str::from_utf8(bytes).map_err(|e| XmlError(format!("not UTF-8: {e}")))?;
        let mut reader = NsReader::from_str(text);
        loop {
            let (resolved, event) = reader
                .read_resolved_event()
                .map_err(|e| XmlError(e.to_string()))?;
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let ns = match resolved {
                        ResolveResult::Bound(ns) => Some(ns.0.to_owned()),
                        _ => None,
                    };
                    return start_element(ns, e);
                }
                Event::Eof => return Err(XmlError("no root element".into())),
                _ => {}
            }
        }
    }

    /// One attribute of the root element, its value normalized, reading neither the rest of
    /// the document nor the root's other values (a sealed CFDI's `Certificado` alone is 1.7 KB):
    /// how every stamp's Sello is compared with the sealed document's.
    pub fn root_attr(bytes: &[u8], name: &str) -> Result<Option<String>, XmlError> {
        let mut reader = NsReader::from_reader(bytes);
        loop {
            match reader.read_event().map_err(|e| XmlError(e.to_string()))? {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    for attr in e.attributes() {
                        let attr = attr.map_err(|e| XmlError(e.to_string()))?;
                        if attr.key.0 == name {
                            let value = attr
                                .normalized_value(XmlVersion::Implicit1_0)
                                .map_err(|e| XmlError(format!("attribute {name}: {e}")))?;
                            return Ok(Some(value.into_owned()));
                        }
                    }
                    return Ok(None);
                }
                Event::Eof => return Err(XmlError("no root element".into())),
                _ => {}
            }
        }
    }

    /// The first `{ns}name` element of a document (its start tag: attributes, no children),
    /// reading the whole document so a malformed one is still refused, but without building
    /// its tree: how a stamped CFDI's TFD is read cheaply.
    pub fn find_in(bytes: &[u8], ns: &str, name: &str) -> Result<Option<Element>, XmlError> {
        let text = std::str::from_utf8(bytes).map_err(|e| XmlError(format!("not UTF-8: {e}")))?;
        let mut reader = NsReader::from_str(text);
        let mut found = None;
        let mut depth = 0usize;
        let mut seen_root = false;
        loop {
            let pos = reader.buffer_position();
            let (resolved, event) = reader
                .read_resolved_event()
                .map_err(|e| XmlError(format!("after byte {pos}: {e}")))?;
            if let ResolveResult::Unknown(p) = resolved {
                return Err(XmlError(format!("undeclared namespace prefix `{p}`")));
            }
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    if depth == 0 && seen_root {
                        return Err(XmlError("more than one root element".into()));
                    }
                    seen_root = true;
                    if matches!(event, Event::Start(_)) {
                        depth += 1;
                    }
                    if found.is_none()
                        && e.local_name().as_ref() == name
                        && matches!(resolved, ResolveResult::Bound(n) if n.0 == ns)
                    {
                        found = Some(start_element(Some(ns.to_owned()), e)?);
                    }
                }
                Event::End(_) => depth = depth.saturating_sub(1),
                Event::Eof => break,
                _ => {}
            }
        }
        if depth != 0 {
            return Err(XmlError("document ends inside an element".into()));
        }
        if !seen_root {
            return Err(XmlError("no root element".into()));
        }
        Ok(found)
    }

    /// Whether this element is `{ns}name`.
    pub fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    /// The value of an unprefixed attribute, if present.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Child elements in document order.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// Child elements named `{ns}name`.
    pub fn children_named<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements().filter(move |e| e.is(ns, name))
    }

    /// The first child element named `{ns}name`.
    pub fn child(&self, ns: &str, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.is(ns, name))
    }

    /// Attribute `attr` of the first child element named `{ns}name` (e.g. `cfdi:Emisor@Rfc`).
    pub fn child_attr(&self, ns: &str, name: &str, attr: &str) -> Option<&str> {
        self.child(ns, name).and_then(|e| e.attr(attr))
    }

    /// Follows a path of child names in one namespace, collecting every match (like XPath
    /// `./a/b/c`).
    pub fn path<'a>(&'a self, ns: &'a str, names: &[&'a str]) -> Vec<&'a Element> {
        let mut current = vec![self];
        for name in names {
            current = current
                .into_iter()
                .flat_map(|e| e.children_named(ns, name))
                .collect();
        }
        current
    }

    /// The concatenated text of all descendants (XPath `string()`).
    pub fn text_content(&self) -> String {
        let mut out = String::new();
        fn walk(e: &Element, out: &mut String) {
            for n in &e.children {
                match n {
                    Node::Text(t) => out.push_str(t),
                    Node::Element(c) => walk(c, out),
                }
            }
        }
        walk(self, &mut out);
        out
    }
}

fn attach(stack: &mut [Element], root: &mut Option<Element>, el: Element) -> Result<(), XmlError> {
    match stack.last_mut() {
        Some(parent) => parent.children.push(Node::Element(el)),
        None if root.is_none() => *root = Some(el),
        None => return Err(XmlError("more than one root element".into())),
    }
    Ok(())
}

fn push_text(parent: &mut Element, s: &str) {
    if let Some(Node::Text(last)) = parent.children.last_mut() {
        last.push_str(s);
    } else {
        parent.children.push(Node::Text(s.to_owned()));
    }
}

fn resolve_ref(name: &str) -> Option<String> {
    let simple = match name {
        "lt" => "<",
        "gt" => ">",
        "amp" => "&",
        "apos" => "'",
        "quot" => "\"",
        _ => "",
    };
    if !simple.is_empty() {
        return Some(simple.to_owned());
    }
    let code = if let Some(hex) = name.strip_prefix("#x") {
        u32::from_str_radix(hex, 16).ok()?
    } else {
        name.strip_prefix('#')?.parse().ok()?
    };
    char::from_u32(code).map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMPED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<cfdi:Comprobante xmlns:cfdi="http://www.sat.gob.mx/cfd/4" Sello="abc" Total="1.00"><cfdi:Emisor Rfc="EKU9003173C9"/><cfdi:Complemento><tfd:TimbreFiscalDigital xmlns:tfd="http://www.sat.gob.mx/TimbreFiscalDigital" UUID="AAAA" SelloCFD="abc"/></cfdi:Complemento></cfdi:Comprobante>"#;

    #[test]
    fn find_in_reads_the_tfd_and_parse_root_the_root_tag() {
        let tfd = Element::find_in(STAMPED.as_bytes(), NS_TFD, "TimbreFiscalDigital")
            .expect("well-formed")
            .expect("a TFD");
        assert_eq!(tfd.attr("UUID"), Some("AAAA"));
        assert!(tfd.is(NS_TFD, "TimbreFiscalDigital"));
        assert_eq!(
            Element::find_in(STAMPED.as_bytes(), NS_CFDI, "Addenda").expect("well-formed"),
            None
        );
        let root = Element::parse_root(STAMPED.as_bytes()).expect("root");
        assert!(root.is(NS_CFDI, "Comprobante"));
        assert_eq!(root.attr("Sello"), Some("abc"));
        assert!(root.children.is_empty());
        let sello = Element::root_attr(STAMPED.as_bytes(), "Sello").expect("root");
        assert_eq!(sello.as_deref(), root.attr("Sello"));
        assert!(
            Element::root_attr(STAMPED.as_bytes(), "UUID")
                .expect("root")
                .is_none()
        );
        assert!(Element::root_attr(b"  ", "Sello").is_err());
        // The same answers as the whole tree.
        let full = Element::parse(STAMPED.as_bytes()).expect("tree");
        assert_eq!(full.attr("Total"), root.attr("Total"));
    }

    #[test]
    fn find_in_refuses_what_parse_refuses() {
        let cut = &STAMPED[..STAMPED.len() - 20];
        assert!(Element::parse(cut.as_bytes()).is_err());
        assert!(Element::find_in(cut.as_bytes(), NS_TFD, "TimbreFiscalDigital").is_err());
        let two_roots = format!("{STAMPED}<x/>");
        assert!(Element::find_in(two_roots.as_bytes(), NS_TFD, "TimbreFiscalDigital").is_err());
        let undeclared = "<a:b/>";
        assert!(Element::find_in(undeclared.as_bytes(), NS_TFD, "b").is_err());
        assert!(Element::find_in(b"", NS_TFD, "b").is_err());
    }
}
