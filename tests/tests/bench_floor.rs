//! The bare floor `bench fed-mail` compares cross-host mail with (`tuic_tests::bench_floor`)
//! measures what it says: real round trips from node B's namespace through a relay in the
//! hub's namespace to an echo in node C's, every message checked on its way back, and with a
//! sync file, each message written to it before the answer.

use tuic_tests::bench_floor::relay_round_trips;
use tuic_tests::netns::Net;

#[test]
fn the_floor_relays_real_round_trips_between_namespaces() {
    let net = Net::star(2).unwrap();
    let rate = relay_round_trips(&net, 200, 2, None).unwrap();
    assert!(rate > 0.0, "{rate}");

    let dir = tempfile::tempdir().unwrap();
    let sync = dir.path().join("floor-sync");
    let synced = relay_round_trips(&net, 100, 2, Some(&sync)).unwrap();
    assert!(synced > 0.0, "{synced}");
    // The echo wrote each message to the file before answering (the last one is there).
    let bytes = std::fs::read(&sync).unwrap();
    assert_eq!(bytes.len(), 256);
    assert_eq!(&bytes[8..], &[7u8; 248][..]);
}
