//! Which ports are polled and where a forwarded packet leaves: the
//! `[dpdk]` port settings checked and turned into index maps, before any
//! port is touched. Plain data (no DPDK), so it is tested everywhere.

use std::collections::HashSet;

use crate::DpdkError;

/// The ports of a run and the paths between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPlan {
    /// Ports polled for packets, in order.
    pub polled: Vec<String>,
    /// Ports transmitted on, in order (each once).
    pub outputs: Vec<String>,
    /// For polled port i: the index in `outputs` its forwarded packets
    /// leave by (`None`: no output port; they are dropped and counted).
    pub forward: Vec<Option<usize>>,
    /// Output port n of `redirect N` → index in `outputs`.
    pub redirect: Vec<usize>,
}

impl PortPlan {
    /// Checks the settings: either one-way (`rx_ports`, forwarding to
    /// `tx_ports[0]`) or cross-connect (`xconnect` pairs, each port polled
    /// and forwarding to its peer); `tx_ports` numbers the ports of
    /// `redirect N` in both.
    pub fn new(
        rx_ports: &[String],
        tx_ports: &[String],
        xconnect: &[(String, String)],
    ) -> Result<Self, DpdkError> {
        let mut seen = HashSet::new();
        for p in rx_ports {
            if !seen.insert(p) {
                return Err(DpdkError::Usage(format!("dpdk.rx_ports lists {p:?} twice")));
            }
        }
        let mut polled: Vec<String> = Vec::new();
        // Peer of each polled port, by name (one-way: tx_ports[0]).
        let mut peer: Vec<Option<&String>> = Vec::new();
        match (rx_ports.is_empty(), xconnect.is_empty()) {
            (true, true) => {
                return Err(DpdkError::Usage(
                    "dpdk: no port to poll: set dpdk.xconnect (port pairs) \
                            or dpdk.rx_ports (one-way)"
                        .into(),
                ))
            }
            (false, false) => {
                return Err(DpdkError::Usage(
                    "dpdk.rx_ports and dpdk.xconnect are both set: with xconnect \
                            every port of every pair is polled and forwards to its peer, \
                            so list the pairs only (tx_ports keeps numbering the ports \
                            of `redirect N`)"
                        .into(),
                ))
            }
            (false, true) => {
                polled.extend(rx_ports.iter().cloned());
                peer.extend(rx_ports.iter().map(|_| tx_ports.first()));
            }
            (true, false) => {
                let mut paired = HashSet::new();
                for (a, b) in xconnect {
                    if a == b {
                        return Err(DpdkError::Usage(format!(
                            "dpdk.xconnect pairs {a:?} with itself: a pair joins two ports"
                        )));
                    }
                    for p in [a, b] {
                        if !paired.insert(p) {
                            return Err(DpdkError::Usage(format!(
                                "dpdk.xconnect lists {p:?} in two pairs: a port has one peer"
                            )));
                        }
                    }
                    polled.push(a.clone());
                    peer.push(Some(b));
                    polled.push(b.clone());
                    peer.push(Some(a));
                }
            }
        }
        let mut outputs: Vec<String> = Vec::new();
        let mut index_of = |name: &String| -> usize {
            match outputs.iter().position(|o| o == name) {
                Some(i) => i,
                None => {
                    outputs.push(name.clone());
                    outputs.len() - 1
                }
            }
        };
        let forward = peer.iter().map(|p| p.map(&mut index_of)).collect();
        let redirect = tx_ports.iter().map(&mut index_of).collect();
        Ok(Self {
            polled,
            outputs,
            forward,
            redirect,
        })
    }

    /// Every port of the run (polled or output), each once.
    pub fn all(&self) -> Vec<&String> {
        let mut all: Vec<&String> = self.polled.iter().collect();
        for o in &self.outputs {
            if !all.contains(&o) {
                all.push(o);
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(std::string::ToString::to_string).collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn one_way_forwards_to_the_first_output_port() {
        let p = PortPlan::new(&s(&["r0", "r1"]), &s(&["t0", "r0", "t2"]), &[]).unwrap();
        assert_eq!(p.polled, s(&["r0", "r1"]));
        assert_eq!(p.outputs, s(&["t0", "r0", "t2"]));
        assert_eq!(p.forward, vec![Some(0), Some(0)]);
        assert_eq!(p.redirect, vec![0, 1, 2]);
        let p = PortPlan::new(&s(&["r0"]), &[], &[]).unwrap();
        assert_eq!(p.forward, vec![None]);
    }

    #[test]
    fn pairs_forward_to_their_peer_and_redirects_keep_their_numbers() {
        let p =
            PortPlan::new(&[], &s(&["mirror", "a"]), &pairs(&[("a", "b"), ("c", "d")])).unwrap();
        assert_eq!(p.polled, s(&["a", "b", "c", "d"]));
        let out = |i: usize| p.forward[i].map(|o| p.outputs[o].as_str());
        assert_eq!(
            [out(0), out(1), out(2), out(3)],
            [Some("b"), Some("a"), Some("d"), Some("c")]
        );
        let red: Vec<&str> = p.redirect.iter().map(|&o| p.outputs[o].as_str()).collect();
        assert_eq!(red, ["mirror", "a"]);
        assert_eq!(p.all().len(), 5);
    }

    #[test]
    fn mixed_or_inconsistent_settings_are_refused_with_the_reason() {
        // Every refusal is a usage error; its text says why.
        let usage = |e: DpdkError| match e {
            DpdkError::Usage(why) => why,
            other => panic!("not a usage error: {other}"),
        };
        let e = usage(PortPlan::new(&s(&["a"]), &[], &pairs(&[("a", "b")])).unwrap_err());
        assert!(e.contains("both set"), "{e}");
        let e = usage(PortPlan::new(&[], &[], &[]).unwrap_err());
        assert!(e.contains("no port to poll"), "{e}");
        let e = usage(PortPlan::new(&[], &[], &pairs(&[("a", "a")])).unwrap_err());
        assert!(e.contains("with itself"), "{e}");
        let e = usage(PortPlan::new(&[], &[], &pairs(&[("a", "b"), ("b", "c")])).unwrap_err());
        assert!(e.contains("\"b\" in two pairs"), "{e}");
        let e = usage(PortPlan::new(&s(&["a", "a"]), &[], &[]).unwrap_err());
        assert!(e.contains("twice"), "{e}");
    }
}
