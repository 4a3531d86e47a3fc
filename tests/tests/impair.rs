//! The packet-level impairment (`tuic_tests::impair::TunLink`) is real: between two network
//! namespaces, UDP probes and a TCP echo across the TUN link take at least the configured
//! delay each way, the configured share of packets goes missing, TCP still delivers every
//! byte, and the devices are gone when the link drops.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tuic_tests::impair::{Params, TUN_NAME, TunLink};
use tuic_tests::netns::Net;

const PORT: u16 = 7777;

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let nsf = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            nsf.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
}

/// A UDP echo on the far end (`B_ADDR`) until `stop` (bounded by a minute); returns once bound.
fn udp_echo(ns: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_ns(ns, move || {
        let s = UdpSocket::bind((TunLink::B_ADDR, PORT)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut echoed = 0;
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], from).unwrap();
                echoed += 1;
            }
        }
        echoed
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    h
}

fn far() -> SocketAddr {
    format!("{}:{PORT}", TunLink::B_ADDR).parse().unwrap()
}

#[test]
fn probes_take_the_configured_delay_each_way() {
    let net = Net::star(1).unwrap();
    let link = TunLink::open(net.hub(), net.node(0), Params::CLEAN, 1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echo = udp_echo(net.node(0), stop.clone());
    let rtts = |n: usize| {
        in_ns(net.hub(), move || {
            let s = UdpSocket::bind((TunLink::A_ADDR, 0)).unwrap();
            s.connect(far()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut v = Vec::new();
            let mut buf = [0u8; 8];
            for i in 0..n as u64 {
                let t0 = Instant::now();
                s.send(&i.to_be_bytes()).unwrap();
                // No loss configured: every probe comes back, in order.
                let got = s.recv(&mut buf).expect("the probe came back");
                assert_eq!(&buf[..got], &i.to_be_bytes());
                v.push(t0.elapsed());
            }
            v
        })
        .join()
        .unwrap()
    };
    let clean = rtts(20);
    let delay = Duration::from_millis(60);
    link.set(Params { loss: 0.0, delay });
    let slow = rtts(20);
    stop.store(true, Ordering::Relaxed);
    assert!(echo.join().unwrap() >= 40);
    let mut c = clean.clone();
    c.sort();
    eprintln!(
        "clean rtt median {:?}, with {delay:?} each way: {slow:?}",
        c[10]
    );
    assert!(
        c[10] < Duration::from_millis(30),
        "clean median {:?}",
        c[10]
    );
    for r in &slow {
        assert!(*r >= 2 * delay, "a round trip of {r:?} beat 2 x {delay:?}");
        assert!(*r < 2 * delay + Duration::from_secs(2), "round trip {r:?}");
    }
    let [ab, ba] = link.counts();
    assert_eq!(ab.lost + ba.lost, 0);
    assert!(!link.failed());
}

#[test]
fn the_configured_share_of_packets_is_lost() {
    let net = Net::star(1).unwrap();
    let loss = 0.2;
    let link = TunLink::open(
        net.hub(),
        net.node(0),
        Params {
            loss,
            delay: Duration::ZERO,
        },
        2,
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let echo = udp_echo(net.node(0), stop.clone());
    let n = 500u64;
    let back = in_ns(net.hub(), move || {
        let s = UdpSocket::bind((TunLink::A_ADDR, 0)).unwrap();
        s.connect(far()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        let mut buf = [0u8; 8];
        // Batches of ten, each drained until the line is quiet for 100 ms (bounded), so no
        // socket buffer on the way overflows.
        for batch in 0..n / 10 {
            for i in batch * 10..batch * 10 + 10 {
                s.send(&i.to_be_bytes()).unwrap();
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                match s.recv(&mut buf) {
                    Ok(8) => {
                        seen.insert(u64::from_be_bytes(buf));
                    }
                    _ => break,
                }
            }
        }
        seen.len() as u64
    })
    .join()
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    let [ab, ba] = link.counts();
    eprintln!("{back} of {n} probes came back; a->b {ab:?}, b->a {ba:?}");
    // Each probe crosses twice: (1 - loss)^2 = 0.64 expected back.
    let frac = back as f64 / n as f64;
    assert!((frac - 0.64).abs() < 0.1, "{back} of {n} came back");
    // The link's own count of the probes it dropped on the way out.
    let rate = ab.lost as f64 / ab.offered as f64;
    assert!(ab.offered >= n, "{ab:?}");
    assert!((rate - loss).abs() < 0.06, "a->b loss rate {rate}");
    assert_eq!(ab.overflow + ba.overflow, 0);
    assert!(!link.failed());
}

#[test]
fn tcp_delivers_every_byte_across_loss_and_delay() {
    let net = Net::star(1).unwrap();
    let delay = Duration::from_millis(20);
    let link = TunLink::open(net.hub(), net.node(0), Params { loss: 0.05, delay }, 3).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = in_ns(net.node(0), move || {
        let l = TcpListener::bind((TunLink::B_ADDR, PORT)).unwrap();
        tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        let mut total = 0;
        loop {
            let n = c.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            c.write_all(&buf[..n]).unwrap();
            total += n;
        }
        total
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let size = 256 * 1024;
    let (elapsed, echoed) = in_ns(net.hub(), move || {
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let t0 = Instant::now();
        let mut c = TcpStream::connect_timeout(&far(), Duration::from_secs(20)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut w = c.try_clone().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&sent).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut got = Vec::with_capacity(size);
        c.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        (t0.elapsed(), got == data)
    })
    .join()
    .unwrap();
    assert_eq!(server.join().unwrap(), size);
    assert!(echoed, "the echo differs from what was sent");
    let [ab, ba] = link.counts();
    eprintln!("256 KiB echoed in {elapsed:?}; a->b {ab:?}, b->a {ba:?}");
    // Handshake plus data: at least a few round trips of 2 x delay.
    assert!(elapsed >= 4 * delay, "{elapsed:?}");
    assert!(ab.lost + ba.lost > 0, "nothing was lost: {ab:?} {ba:?}");
    assert!(!link.failed());
}

#[test]
fn the_devices_go_with_the_link() {
    let net = Net::star(1).unwrap();
    let link = TunLink::open(net.hub(), net.node(0), Params::CLEAN, 4).unwrap();
    let shown = |ns: &str| {
        std::process::Command::new("ip")
            .args(["-n", ns, "link", "show", TUN_NAME])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(shown(net.hub()) && shown(net.node(0)));
    drop(link);
    assert!(!shown(net.hub()) && !shown(net.node(0)));
}

/// `FedBed::start_impaired`: the hub reaches the node over the TUN link, over either transport
/// (the WebSocket's TCP and QUIC's UDP alike): a keystroke through the hub to a `cat` on the
/// node takes at least the link's delay both ways, and the link counted the traffic.
#[tokio::test]
async fn a_fed_bed_reaches_the_impaired_node_over_the_link() {
    use serde_json::json;
    use tuic_tests::bench_fed::{key_round_trips, ws_at};
    use tuic_tests::fed::FedBed;
    use tuic_tests::term::read_until;

    let delay = Duration::from_millis(40);
    for transport in ["websocket", "quic"] {
        let bed = FedBed::start_impaired(
            1,
            json!({}),
            json!({"hub": {"transport": transport}}),
            0,
            Params { loss: 0.0, delay },
        )
        .await
        .unwrap();
        assert_eq!(bed.nodes[0].url, format!("http://{}:9876", TunLink::B_ADDR));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let rows = bed.connections().await.unwrap();
            if rows[0]["peer_link_up"] == true && rows[0]["transport"] == transport {
                break;
            }
            assert!(Instant::now() < deadline, "{transport}: {rows:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let id = bed
            .create_on_node(
                0,
                json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                    "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
            )
            .await
            .unwrap();
        let address = format!("{}/{id}", bed.nodes[0].id);
        bed.wait_listed(&address, Duration::from_secs(30))
            .await
            .unwrap();
        let mut ws = ws_at(&bed.hub.socket, &address, "?binary=1&from_byte=0")
            .await
            .unwrap();
        read_until(&mut ws, b"READY", Duration::from_secs(30))
            .await
            .unwrap();
        let before = bed.impaired.as_ref().unwrap().counts();
        let keys = key_round_trips(&mut ws, 5, Duration::from_secs(30))
            .await
            .unwrap();
        let after = bed.impaired.as_ref().unwrap().counts();
        for ms in &keys {
            assert!(
                *ms >= 2.0 * delay.as_secs_f64() * 1e3,
                "{transport}: a keystroke took {ms} ms over a link with {delay:?} each way"
            );
        }
        assert!(after[0].delivered >= before[0].delivered + 5, "{after:?}");
        assert!(after[1].delivered >= before[1].delivered + 5, "{after:?}");
        assert!(!bed.impaired.as_ref().unwrap().failed());
    }
}
