//! Where a placeholder sits in a request — a header value, the query, or a JSON body string — and
//! small sets of those sites.
//!
//! An alias declares the sites its secret may go to; an allow rule's `inject` lists the sites it
//! admits. Header is the default of both.

use std::fmt;

use serde::{Serialize, Serializer};

/// One place a secret can be put into a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    /// A header value.
    Header,
    /// The query string (percent-encoded).
    Query,
    /// A string value of a JSON body.
    Body,
}

// === impl Site ===

impl Site {
    /// Every site, in order.
    pub const ALL: [Site; 3] = [Site::Header, Site::Query, Site::Body];

    /// Reads `header`, `query` or `body`.
    pub fn parse(text: &str) -> Option<Site> {
        match text {
            "header" => Some(Site::Header),
            "query" => Some(Site::Query),
            "body" => Some(Site::Body),
            _ => None,
        }
    }

    /// The site's name as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Site::Header => "header",
            Site::Query => "query",
            Site::Body => "body",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Site::Header => 1,
            Site::Query => 2,
            Site::Body => 4,
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Site {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A set of sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SiteSet(u8);

// === impl SiteSet ===

impl SiteSet {
    /// No site.
    pub const EMPTY: SiteSet = SiteSet(0);
    /// Only headers: the default for aliases and allow rules.
    pub const HEADER: SiteSet = SiteSet(1);

    /// The set holding the given sites.
    pub fn of(sites: impl IntoIterator<Item = Site>) -> SiteSet {
        sites.into_iter().fold(SiteSet::EMPTY, SiteSet::with)
    }

    /// This set plus `site`.
    #[must_use]
    pub fn with(self, site: Site) -> SiteSet {
        SiteSet(self.0 | site.bit())
    }

    /// Whether `site` is in the set.
    pub fn contains(self, site: Site) -> bool {
        self.0 & site.bit() != 0
    }

    /// Whether every site of `self` is in `other`.
    pub fn is_subset(self, other: SiteSet) -> bool {
        self.0 & !other.0 == 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The sites in order.
    pub fn iter(self) -> impl Iterator<Item = Site> {
        Site::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

impl Serialize for SiteSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}
