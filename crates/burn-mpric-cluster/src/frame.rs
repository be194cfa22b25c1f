//! Frames on the wire: `MPRC`, a version byte, a kind byte, a little-endian `u32` length and
//! the payload. A control frame holds one JSON [`Control`] message (at most
//! [`MAX_CONTROL_BYTES`]); a values frame holds a step number and f32 values, little-endian.
//! Anything else (another magic, version or kind, a length above the limit, bad JSON) is an
//! error for the connection, never a panic.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The first bytes of every frame.
pub const MAGIC: [u8; 4] = *b"MPRC";
/// The protocol version; a peer of another version is refused at its first frame.
pub const VERSION: u8 = 1;
/// The largest control payload accepted.
pub const MAX_CONTROL_BYTES: usize = 64 * 1024;

const CONTROL: u8 = 1;
const VALUES: u8 = 2;

/// The control messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Control {
    /// A worker's first message.
    Hello {
        /// Its rank.
        rank: usize,
        /// The number of ranks it expects.
        world: usize,
        /// What must be equal on every rank (the recipe's fields, flattened), by name.
        identity: Vec<(String, String)>,
    },
    /// Every rank has joined: the run starts.
    Welcome,
    /// The coordinator turns this connection away.
    Refused {
        /// Why, in one line.
        reason: String,
    },
    /// A rank finished its last step.
    Done,
    /// The coordinator stops a run before it started: `rank` was refused (another recipe,
    /// world size or rank range), so the run cannot start as asked.
    Stopped {
        /// The refused rank.
        rank: usize,
        /// Why it was refused.
        reason: String,
    },
    /// The coordinator stops the run: `rank` was lost.
    Abort {
        /// The lost rank.
        rank: usize,
        /// What happened to it.
        reason: String,
    },
}

/// One frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A control message.
    Control(Control),
    /// The values of a step.
    Values {
        /// The step.
        step: u64,
        /// The values.
        values: Vec<f32>,
    },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed or timed out.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection.
    #[error("closed its connection")]
    Closed,
    /// The bytes are not this protocol's.
    #[error("sent {0}")]
    Garbage(String),
}

impl FrameError {
    /// Whether the read ran out of time (rather than failing).
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// Writes a control message.
pub(crate) fn write_control(out: &mut impl Write, message: &Control) -> io::Result<()> {
    let payload = serde_json::to_vec(message).map_err(io::Error::other)?;
    let mut frame = header(CONTROL, payload.len())?;
    frame.extend_from_slice(&payload);
    send(out, &frame)
}

/// Writes a step's values.
pub(crate) fn write_values(out: &mut impl Write, step: u64, values: &[f32]) -> io::Result<()> {
    // The values go straight into the frame: a step's buffer is copied once.
    let mut frame = header(VALUES, 8 + 4 * values.len())?;
    frame.extend_from_slice(&step.to_le_bytes());
    for v in values {
        frame.extend_from_slice(&v.to_le_bytes());
    }
    send(out, &frame)
}

/// A frame's first bytes, with room for its `len`-byte payload.
fn header(kind: u8, len: usize) -> io::Result<Vec<u8>> {
    let len32 = u32::try_from(len).map_err(|_| io::Error::other("a frame of more than 4 GiB"))?;
    let mut frame = Vec::with_capacity(10 + len);
    frame.extend_from_slice(&MAGIC);
    frame.push(VERSION);
    frame.push(kind);
    frame.extend_from_slice(&len32.to_le_bytes());
    Ok(frame)
}

fn send(out: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    out.write_all(frame)?;
    out.flush()
}

/// Reads one frame; a values frame may hold at most `max_values` values.
pub(crate) fn read_frame(input: &mut impl Read, max_values: usize) -> Result<Frame, FrameError> {
    let mut head = [0u8; 10];
    match input.read(&mut head[..1]) {
        Ok(0) => return Err(FrameError::Closed),
        Ok(_) => {}
        Err(e) => return Err(closed_or_io(e)),
    }
    input.read_exact(&mut head[1..]).map_err(closed_or_io)?;
    if head[..4] != MAGIC {
        return Err(FrameError::Garbage(format!(
            "bytes that are not this protocol's (first bytes {:02x?})",
            &head[..4]
        )));
    }
    if head[4] != VERSION {
        return Err(FrameError::Garbage(format!(
            "protocol version {}, this is version {VERSION}",
            head[4]
        )));
    }
    let len = u32::from_le_bytes([head[6], head[7], head[8], head[9]]) as usize;
    let max = match head[5] {
        CONTROL => MAX_CONTROL_BYTES,
        VALUES => 8 + 4 * max_values,
        other => {
            return Err(FrameError::Garbage(format!(
                "a frame of unknown kind {other}"
            )));
        }
    };
    if len > max {
        return Err(FrameError::Garbage(format!(
            "a frame of {len} bytes, more than the {max} allowed"
        )));
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload).map_err(closed_or_io)?;
    match head[5] {
        CONTROL => serde_json::from_slice(&payload)
            .map(Frame::Control)
            .map_err(|e| {
                FrameError::Garbage(format!("a control message that does not parse: {e}"))
            }),
        _ => {
            if len < 8 || !(len - 8).is_multiple_of(4) {
                return Err(FrameError::Garbage(format!(
                    "a values frame of {len} bytes"
                )));
            }
            let step = u64::from_le_bytes(payload[..8].try_into().unwrap_or_default());
            let values = payload[8..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Ok(Frame::Values { step, values })
        }
    }
}

/// A connection the peer closed (cleanly, or by a reset when its process died with unread
/// data) is `Closed`; any other failure is an I/O error.
pub(crate) fn closed_or_io(e: io::Error) -> FrameError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => FrameError::Closed,
        _ => FrameError::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        let hello = Control::Hello {
            rank: 1,
            world: 2,
            identity: vec![("seed".into(), "0".into())],
        };
        write_control(&mut buf, &hello).unwrap();
        write_values(&mut buf, 7, &[1.5, -0.0, f32::INFINITY]).unwrap();
        let mut input = &buf[..];
        assert_eq!(read_frame(&mut input, 8).unwrap(), Frame::Control(hello));
        match read_frame(&mut input, 8).unwrap() {
            Frame::Values { step, values } => {
                assert_eq!(step, 7);
                assert_eq!(values[0], 1.5);
                assert!(values[1].is_sign_negative() && values[2].is_infinite());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(read_frame(&mut input, 8), Err(FrameError::Closed)));
    }

    #[test]
    fn foreign_bytes_are_errors_not_panics() {
        for bytes in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            &[b'M', b'P', b'R', b'C', 9, 1, 0, 0, 0, 0][..],
            &[b'M', b'P', b'R', b'C', VERSION, 7, 0, 0, 0, 0][..],
            &[b'M', b'P', b'R', b'C', VERSION, CONTROL, 255, 255, 255, 255][..],
            &[
                b'M', b'P', b'R', b'C', VERSION, CONTROL, 2, 0, 0, 0, b'{', b'x',
            ][..],
            &[b'M', b'P', b'R', b'C', VERSION, VALUES, 40, 0, 0, 0][..],
        ] {
            let mut input = bytes;
            assert!(
                matches!(read_frame(&mut input, 2), Err(FrameError::Garbage(_))),
                "{bytes:?}"
            );
        }
        let mut cut = &[b'M', b'P', b'R'][..];
        assert!(matches!(read_frame(&mut cut, 2), Err(FrameError::Closed)));
    }
}
