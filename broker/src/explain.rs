//! `mint policy explain` (being written).
