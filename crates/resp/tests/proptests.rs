//! Property tests for the request parser and the frame codec: round trips, independence from
//! how the bytes are split into reads, and robustness against arbitrary input.

use bytes::{Bytes, BytesMut};
use lattice_resp::{decode_frame, encode_frame, Frame, Limits, ProtocolError, RequestParser};
use proptest::collection::vec;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Request parser
// ---------------------------------------------------------------------------------------------

/// One request as a client might write it, with the arguments the server must see.
#[derive(Clone, Debug)]
enum Request {
    /// `*n\r\n$len\r\n...` with arbitrary binary arguments.
    Multibulk(Vec<Vec<u8>>),
    /// Plain words separated by spaces or tabs, ending in `\n` or `\r\n`.
    InlinePlain {
        args: Vec<Vec<u8>>,
        sep: Vec<u8>,
        crlf: bool,
    },
    /// Arbitrary arguments written as double-quoted strings with `\xHH` and `\"`-style escapes.
    InlineQuoted(Vec<Vec<u8>>),
    /// An empty request the server skips: `*0`, `*-1` or a blank line.
    Empty(&'static [u8]),
}

impl Request {
    fn args(&self) -> Option<Vec<Bytes>> {
        match self {
            Request::Multibulk(args)
            | Request::InlinePlain { args, .. }
            | Request::InlineQuoted(args) => {
                Some(args.iter().map(|a| Bytes::copy_from_slice(a)).collect())
            }
            Request::Empty(_) => None,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Multibulk(args) => {
                out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
                for a in args {
                    out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                    out.extend_from_slice(a);
                    out.extend_from_slice(b"\r\n");
                }
            }
            Request::InlinePlain { args, sep, crlf } => {
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(sep);
                    }
                    out.extend_from_slice(a);
                }
                out.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
            Request::InlineQuoted(args) => {
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push(b' ');
                    }
                    out.push(b'"');
                    for (j, &b) in a.iter().enumerate() {
                        match b {
                            b'"' => out.extend_from_slice(b"\\\""),
                            b'\\' => out.extend_from_slice(b"\\\\"),
                            b'\n' if j % 2 == 0 => out.extend_from_slice(b"\\n"),
                            b if b.is_ascii_graphic() || b == b' ' => out.push(b),
                            b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                        }
                    }
                    out.push(b'"');
                }
                out.extend_from_slice(b"\r\n");
            }
            Request::Empty(bytes) => out.extend_from_slice(bytes),
        }
    }
}

fn request() -> impl Strategy<Value = Request> {
    let word = proptest::string::bytes_regex("(?s-u:[a-zA-Z0-9_:{}.-]{1,12})").unwrap();
    prop_oneof![
        4 => vec(vec(any::<u8>(), 0..40), 1..6).prop_map(Request::Multibulk),
        2 => (vec(word, 1..5), prop_oneof![Just(&b" "[..]), Just(&b"  \t"[..]), Just(&b"\t"[..])], any::<bool>())
            .prop_map(|(args, sep, crlf)| Request::InlinePlain { args, sep: sep.to_vec(), crlf }),
        2 => vec(vec(any::<u8>(), 0..20), 1..4).prop_map(Request::InlineQuoted),
        1 => prop_oneof![
            Just(&b"*0\r\n"[..]),
            Just(&b"*-1\r\n"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"\n"[..]),
            Just(&b"   \t \r\n"[..]),
        ]
        .prop_map(Request::Empty),
    ]
}

fn stream(requests: &[Request]) -> (Vec<u8>, Vec<Vec<Bytes>>) {
    let mut bytes = Vec::new();
    for r in requests {
        r.encode(&mut bytes);
    }
    let expected = requests.iter().filter_map(Request::args).collect();
    (bytes, expected)
}

/// Parses everything currently in `buf`, appending commands to `out`, until more bytes are
/// needed or an error occurs.
fn drain(
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    out: &mut Vec<Vec<Bytes>>,
) -> Result<(), ProtocolError> {
    while let Some(args) = parser.parse(buf)? {
        assert!(!args.is_empty(), "empty requests must be skipped");
        out.push(args);
    }
    Ok(())
}

/// Feeds `input` to a fresh parser in chunks of the given sizes (the last chunk takes the
/// rest). Returns the commands parsed and the error that stopped parsing, if any.
fn feed(
    input: &[u8],
    chunks: impl IntoIterator<Item = usize>,
    limits: Limits,
) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
    let mut parser = RequestParser::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut chunks = chunks.into_iter();
    loop {
        let n = chunks.next().unwrap_or(rest.len()).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        if let Err(e) = drain(&mut parser, &mut buf, &mut out) {
            return (out, Some(e));
        }
        if rest.is_empty() {
            return (out, None);
        }
    }
}

fn one_shot(input: &[u8]) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
    feed(input, [], Limits::default())
}

/// Bytes that look like protocol: fragments of valid requests and frames mixed with noise, so
/// random input reaches deep into both parsers.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(&b"*"[..]),
        Just(&b"$"[..]),
        Just(&b"%"[..]),
        Just(&b"~"[..]),
        Just(&b">"[..]),
        Just(&b"|"[..]),
        Just(&b"="[..]),
        Just(&b"!"[..]),
        Just(&b"+"[..]),
        Just(&b"-"[..]),
        Just(&b":"[..]),
        Just(&b","[..]),
        Just(&b"("[..]),
        Just(&b"#"[..]),
        Just(&b"_"[..]),
        Just(&b"0"[..]),
        Just(&b"1"[..]),
        Just(&b"2"[..]),
        Just(&b"3"[..]),
        Just(&b"-1"[..]),
        Just(&b"4"[..]),
        Just(&b"txt:"[..]),
        Just(&b"inf"[..]),
        Just(&b"\r\n"[..]),
        Just(&b"\r\n"[..]),
        Just(&b"\r"[..]),
        Just(&b"\n"[..]),
        Just(&b" "[..]),
        Just(&b"\""[..]),
        Just(&b"'"[..]),
        Just(&b"\\"[..]),
        Just(&b"\\x4"[..]),
        Just(&b"a"[..]),
        Just(&b"\0"[..]),
    ];
    prop_oneof![
        vec(any::<u8>(), 0..200),
        vec(token, 0..80).prop_map(|t| t.concat()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Several requests concatenated in one buffer parse back to their arguments, in order.
    #[test]
    fn requests_round_trip(requests in vec(request(), 1..10)) {
        let (bytes, expected) = stream(&requests);
        let (got, err) = one_shot(&bytes);
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, expected);
    }

    /// However the stream is split into reads, the same requests come out.
    #[test]
    fn requests_survive_any_split(requests in vec(request(), 1..6), sizes in vec(1usize..64, 0..40)) {
        let (bytes, expected) = stream(&requests);
        let limits = Limits::default();
        // One byte per read: every boundary at once.
        let (got, err) = feed(&bytes, std::iter::repeat(1), limits);
        prop_assert_eq!(err, None);
        prop_assert_eq!(&got, &expected);
        // Exactly one split, at each boundary in turn.
        for k in 0..=bytes.len() {
            let (got, err) = feed(&bytes, [k], limits);
            prop_assert_eq!(err, None);
            prop_assert_eq!(&got, &expected, "split at {}", k);
        }
        // Random read sizes.
        let (got, err) = feed(&bytes, sizes, limits);
        prop_assert_eq!(err, None);
        prop_assert_eq!(&got, &expected);
    }

    /// Arbitrary bytes never panic the request parser, whatever the read sizes and limits.
    #[test]
    fn request_parser_never_panics(
        input in soup(),
        sizes in vec(1usize..16, 0..20),
        small in any::<bool>(),
    ) {
        let limits = if small {
            Limits { max_bulk_len: 8, max_multibulk_len: 4, max_inline_len: 6 }
        } else {
            Limits::default()
        };
        let _ = feed(&input, sizes, limits);
    }

    /// With the default limits and input far below them, every decision is taken on complete
    /// lines or payloads, so even errors do not depend on how the bytes were split.
    #[test]
    fn request_parser_outcome_is_split_independent(input in soup()) {
        let whole = one_shot(&input);
        let bytewise = feed(&input, std::iter::repeat(1), Limits::default());
        prop_assert_eq!(whole, bytewise);
    }
}

// ---------------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------------

/// Bytes without CR or LF, for simple strings and errors.
fn line() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..16).prop_map(|v| {
        v.into_iter()
            .filter(|b| *b != b'\r' && *b != b'\n')
            .collect::<Vec<u8>>()
            .into()
    })
}

fn blob() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..32).prop_map(Bytes::from)
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => any::<f64>().prop_filter("NaN never compares equal", |d| !d.is_nan()),
        1 => (-1000i32..1000).prop_map(|n| f64::from(n) / 8.0),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(f64::MIN_POSITIVE),
        1 => Just(5e-324),
        1 => Just(f64::MAX),
        1 => Just(-0.0),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        line().prop_map(Frame::Simple),
        line().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        blob().prop_map(Frame::Bulk),
        Just(Frame::Null),
        Just(Frame::NullArray),
        any::<bool>().prop_map(Frame::Boolean),
        double().prop_map(Frame::Double),
        "-?[0-9]{1,40}".prop_map(|s| Frame::BigNumber(s.into())),
        (any::<[u8; 3]>(), blob()).prop_map(|(format, text)| Frame::Verbatim { format, text }),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Frame::Array),
            vec(inner.clone(), 0..6).prop_map(Frame::Set),
            vec(inner.clone(), 0..6).prop_map(Frame::Push),
            vec((inner.clone(), inner.clone()), 0..4).prop_map(Frame::Map),
            (vec((inner.clone(), inner.clone()), 0..3), inner).prop_map(|(attributes, f)| {
                Frame::Attribute {
                    attributes,
                    frame: Box::new(f),
                }
            }),
        ]
    })
}

fn encode(f: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_frame(f, &mut out);
    out.to_vec()
}

/// Decodes every frame in `input`, appending bytes in chunks of the given sizes. Returns the
/// frames and the error that stopped decoding, if any.
fn decode_chunked(
    input: &[u8],
    chunks: impl IntoIterator<Item = usize>,
) -> (Vec<Frame>, Option<ProtocolError>) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut chunks = chunks.into_iter();
    loop {
        let n = chunks.next().unwrap_or(rest.len()).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            let before = buf.clone();
            match decode_frame(&mut buf) {
                Ok(Some(f)) => out.push(f),
                Ok(None) => {
                    assert_eq!(buf, before, "an incomplete frame must not be consumed");
                    break;
                }
                Err(e) => return (out, Some(e)),
            }
        }
        if rest.is_empty() {
            return (out, None);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// decode(encode(f)) == f, consuming exactly the encoding.
    #[test]
    fn frames_round_trip(f in frame()) {
        let bytes = encode(&f);
        let mut buf = BytesMut::from(&bytes[..]);
        let decoded = decode_frame(&mut buf);
        prop_assert_eq!(decoded, Ok(Some(f)));
        prop_assert!(buf.is_empty());
    }

    /// Every proper prefix of an encoding is incomplete (and left untouched); the whole
    /// encoding decodes to the frame.
    #[test]
    fn frames_wait_for_every_byte(f in frame()) {
        let bytes = encode(&f);
        for k in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..k]);
            prop_assert_eq!(decode_frame(&mut buf), Ok(None), "prefix of {} bytes", k);
            prop_assert_eq!(&buf[..], &bytes[..k]);
        }
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert_eq!(decode_frame(&mut buf), Ok(Some(f)));
    }

    /// A stream of frames decodes the same whole, byte by byte, or in random reads.
    #[test]
    fn frame_streams_survive_any_split(frames in vec(frame(), 1..5), sizes in vec(1usize..32, 0..30)) {
        let bytes: Vec<u8> = frames.iter().flat_map(encode).collect();
        prop_assert_eq!(decode_chunked(&bytes, []), (frames.clone(), None));
        prop_assert_eq!(decode_chunked(&bytes, std::iter::repeat(1)), (frames.clone(), None));
        prop_assert_eq!(decode_chunked(&bytes, sizes), (frames, None));
    }

    /// Arbitrary bytes never panic the decoder, and its verdict does not depend on the split.
    #[test]
    fn decoder_never_panics(input in soup()) {
        let whole = decode_chunked(&input, []);
        let bytewise = decode_chunked(&input, std::iter::repeat(1));
        // NaN doubles make frames compare unequal to themselves; compare encodings instead.
        let enc = |r: &(Vec<Frame>, Option<ProtocolError>)| {
            (r.0.iter().map(encode).collect::<Vec<_>>(), r.1.clone())
        };
        prop_assert_eq!(enc(&whole), enc(&bytewise));
    }

    /// Commands built with `Frame::command` are what the server's parser sees.
    #[test]
    fn encoded_commands_parse(args in vec(vec(any::<u8>(), 0..20), 1..6)) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let bytes = encode(&Frame::command(&refs));
        let (got, err) = one_shot(&bytes);
        prop_assert_eq!(err, None);
        let expected: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        prop_assert_eq!(got, vec![expected]);
    }
}
