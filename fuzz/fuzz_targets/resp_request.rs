//! Client bytes, arriving in arbitrary pieces, through the server's request parser and the
//! clients' frame decoder. Besides "never panics, never allocates without bound", two
//! properties give the target teeth:
//! - every request the parser returns, written back as a RESP multibulk, parses to itself;
//! - every frame the decoder returns, encoded again, decodes to itself.
#![no_main]

use bytes::{BufMut, BytesMut};
use lattice_resp::{decode_frame, encode_frame, Limits, RequestParser};
use libfuzzer_sys::fuzz_target;

/// Small limits so that the length checks are reached by short inputs; the defaults
/// (512 MiB bulk strings) would only test that nothing is reserved before bytes arrive.
const LIMITS: Limits = Limits {
    max_bulk_len: 4096,
    max_multibulk_len: 1024,
    max_inline_len: 1024,
};

fuzz_target!(|data: &[u8]| {
    let Some((&chunk_byte, input)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk_byte % 16) + 1;
    parse_requests(input, chunk);
    decode_frames(input, chunk);
});

fn parse_requests(input: &[u8], chunk: usize) {
    let mut parser = RequestParser::new(LIMITS);
    let mut buf = BytesMut::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match parser.parse(&mut buf) {
                Ok(Some(args)) => {
                    assert!(!args.is_empty(), "the parser returned an empty request");
                    check_request_round_trip(&args);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

fn check_request_round_trip(args: &[bytes::Bytes]) {
    let mut wire = BytesMut::new();
    wire.put_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        wire.put_slice(format!("${}\r\n", a.len()).as_bytes());
        wire.put_slice(a);
        wire.put_slice(b"\r\n");
    }
    let mut parser = RequestParser::new(Limits {
        max_bulk_len: usize::MAX / 4,
        max_multibulk_len: usize::MAX / 4,
        max_inline_len: 1 << 20,
    });
    let again = parser
        .parse(&mut wire)
        .expect("a request written back as a multibulk parses")
        .expect("a whole multibulk is a request");
    assert_eq!(again, args, "multibulk round trip changed the request");
    assert!(wire.is_empty(), "multibulk round trip left bytes behind");
}

fn decode_frames(input: &[u8], chunk: usize) {
    let mut buf = BytesMut::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decode_frame(&mut buf) {
                Ok(Some(frame)) => {
                    let mut wire = BytesMut::new();
                    encode_frame(&frame, &mut wire);
                    let again = decode_frame(&mut wire)
                        .expect("an encoded frame decodes")
                        .expect("an encoded frame is complete");
                    assert_eq!(again, frame, "frame round trip changed the frame");
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
