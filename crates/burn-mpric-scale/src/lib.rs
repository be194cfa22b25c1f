//! Loss scaling for Burn as a gradients transform.
