//! A long pipeline, as a benchmark client sends it, parses completely and in order.

use bytes::{Bytes, BytesMut};
use lattice_resp::{Frame, RequestParser};

const REQUESTS: usize = 10_000;

fn pipeline() -> Vec<u8> {
    let mut out = BytesMut::new();
    for i in 0..REQUESTS {
        let key = format!("key:{i}");
        let value = format!("value-{}", i * 7);
        let frame = match i % 3 {
            0 => Frame::command(&[b"SET", key.as_bytes(), value.as_bytes()]),
            1 => Frame::command(&[b"GET", key.as_bytes()]),
            _ => Frame::command(&[b"INCRBY", key.as_bytes(), i.to_string().as_bytes()]),
        };
        lattice_resp::encode_frame(&frame, &mut out);
    }
    out.to_vec()
}

fn check(requests: &[Vec<Bytes>]) {
    assert_eq!(requests.len(), REQUESTS);
    for (i, args) in requests.iter().enumerate() {
        let key = format!("key:{i}");
        match i % 3 {
            0 => {
                assert_eq!(args.len(), 3);
                assert_eq!(&args[0][..], b"SET");
                assert_eq!(&args[2][..], format!("value-{}", i * 7).as_bytes());
            }
            1 => {
                assert_eq!(args.len(), 2);
                assert_eq!(&args[0][..], b"GET");
            }
            _ => {
                assert_eq!(args.len(), 3);
                assert_eq!(&args[0][..], b"INCRBY");
                assert_eq!(&args[2][..], i.to_string().as_bytes());
            }
        }
        assert_eq!(&args[1][..], key.as_bytes());
    }
}

#[test]
fn ten_thousand_requests_in_one_buffer() {
    let mut parser = RequestParser::default();
    let mut buf = BytesMut::from(&pipeline()[..]);
    let mut requests = Vec::new();
    while let Some(args) = parser.parse(&mut buf).unwrap() {
        requests.push(args);
    }
    assert!(buf.is_empty());
    check(&requests);
}

#[test]
fn ten_thousand_requests_in_16k_reads() {
    let input = pipeline();
    let mut parser = RequestParser::default();
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    for chunk in input.chunks(16 * 1024) {
        buf.extend_from_slice(chunk);
        while let Some(args) = parser.parse(&mut buf).unwrap() {
            requests.push(args);
        }
    }
    assert!(buf.is_empty());
    check(&requests);
}

#[test]
fn large_bulk_in_many_reads_uses_the_hint() {
    let payload = vec![b'x'; 1 << 20];
    let mut input = format!("*2\r\n$3\r\nSET\r\n${}\r\n", payload.len()).into_bytes();
    input.extend_from_slice(&payload);
    input.extend_from_slice(b"\r\n");
    let mut parser = RequestParser::default();
    let mut buf = BytesMut::new();
    let mut chunks = input.chunks(4096);
    buf.extend_from_slice(chunks.next().unwrap());
    assert_eq!(parser.parse(&mut buf).unwrap(), None);
    // The header has been read: the driver can reserve for the rest in one go.
    let needed = parser.bytes_needed_hint();
    assert_eq!(needed, payload.len() + 2 - buf.len());
    buf.reserve(needed);
    let capacity = buf.capacity();
    let mut result = None;
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        if let Some(args) = parser.parse(&mut buf).unwrap() {
            result = Some(args);
        }
        assert!(
            buf.capacity() <= capacity,
            "buffer grew after reserving the hint"
        );
    }
    let args = result.expect("request completes");
    assert_eq!(&args[0][..], b"SET");
    assert_eq!(args[1].len(), payload.len());
}
