//! Persistence files as recovery reads them: the frame scanner over a log or snapshot file,
//! then every frame's payload through `Node::load`, the code that rebuilds the keyspace (and
//! decodes DUMP-format values). Damaged input must end in a reported torn tail, corruption or
//! a load error, never a panic, a hang or an unbounded allocation; the node's invariants must
//! hold after whatever part of the input was loaded.
#![no_main]

use lattice_node::{Buggify, Config, Micros, Node};
use lattice_persist::{encode_frame, scan, Kind, ScanEnd};
use libfuzzer_sys::fuzz_target;

const NOW_MS: u64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let now = Micros::from_millis(NOW_MS);
    let mut node = Node::new(Config::default(), 1, Buggify::disabled(), now);
    if mode & 1 == 0 {
        // The bytes as a file: frames, checksums and all.
        let (frames, end) = scan(body, mode & 2 == 0);
        if let ScanEnd::Torn { offset, .. } | ScanEnd::Corrupt { offset, .. } = end {
            assert!(
                offset <= body.len(),
                "damage reported past the end of the file"
            );
        }
        for f in frames {
            assert!(
                f.end <= body.len() && f.offset < f.end,
                "frame outside the file"
            );
            let _ = node.load(now, f.payload);
        }
    } else {
        // The bytes as one record's payload, wrapped in a valid frame, so that the fuzzer
        // reaches the payload decoder without having to find a matching checksum.
        let mut file = Vec::new();
        encode_frame(Kind::Batch, 1, body, &mut file);
        let (frames, end) = scan(&file, true);
        assert_eq!(end, ScanEnd::Clean, "a valid frame did not scan clean");
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].payload, body);
        let _ = node.load(now, frames[0].payload);
    }
    node.check_invariants();
});
