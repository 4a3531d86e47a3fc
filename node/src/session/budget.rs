//! What one terminal may cost: the size caps every create and resize path checks, and the
//! node's cell budget that all live sessions' screens share.
//!
//! A screen of `rows × cols` costs about 50 bytes a cell up front (the emulator keeps a
//! primary and an alternate grid of 24-byte cells, plus the screen-sync copies), so the old
//! cap of 4096 × 4096 let one request take ~800 MB. The caps below hold one session to
//! 1,000 × 1,000 (≈ 50 MB) and all live sessions together to [`NODE_SCREEN_CELLS`] (≈ 200 MB),
//! which still fits 400 ordinary 50 × 200 terminals. Scrollback grows with output and is
//! bounded separately (`grid::SCROLLBACK_ROWS` rows of the session's width).
//!
//! A [`Charge`] is the cells one session holds; it returns them when dropped (the session
//! ended and its screen was released, or a create failed), so the ledger cannot leak.

use std::sync::{Arc, Mutex};

/// Largest accepted rows or cols.
pub const MAX_DIM: u16 = 1000;

/// Largest screen of one session, in cells (rows × cols).
pub const MAX_SESSION_CELLS: u64 = 1_000_000;

/// The screen cells all live sessions of a node may hold together.
pub const NODE_SCREEN_CELLS: u64 = 4_000_000;

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// A zero dimension.
    #[error("rows and cols must be at least 1 (got {rows} × {cols})")]
    Zero {
        /// Asked rows.
        rows: u16,
        /// Asked cols.
        cols: u16,
    },
    /// Over the per-session caps.
    #[error(
        "{rows} × {cols} is over the size cap: rows and cols at most {MAX_DIM} each, at most {MAX_SESSION_CELLS} cells per session"
    )]
    TooLarge {
        /// Asked rows.
        rows: u16,
        /// Asked cols.
        cols: u16,
    },
    /// The node's live sessions already hold most of the budget.
    #[error(
        "the node's terminal cell budget is spent: {asked} more cells asked, {used} of {limit} in use by live sessions; close or shrink a session first"
    )]
    Budget {
        /// Cells the request needs beyond what the session already holds.
        asked: u64,
        /// Cells in use.
        used: u64,
        /// The node's budget.
        limit: u64,
    },
}

impl SizeError {
    /// Stable code: `size_limit` for the per-session caps, `cell_budget` for the node's.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Zero { .. } | Self::TooLarge { .. } => "size_limit",
            Self::Budget { .. } => "cell_budget",
        }
    }

    /// HTTP status: 400 for a size no node accepts, 503 while the node's budget is spent.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Zero { .. } | Self::TooLarge { .. } => 400,
            Self::Budget { .. } => 503,
        }
    }
}

/// Checks a size against the per-session caps.
pub fn check(rows: u16, cols: u16) -> Result<u64, SizeError> {
    if rows == 0 || cols == 0 {
        return Err(SizeError::Zero { rows, cols });
    }
    let cells = u64::from(rows) * u64::from(cols);
    if rows > MAX_DIM || cols > MAX_DIM || cells > MAX_SESSION_CELLS {
        return Err(SizeError::TooLarge { rows, cols });
    }
    Ok(cells)
}

/// The node's ledger of screen cells.
#[derive(Debug)]
pub struct CellBudget {
    used: Mutex<u64>,
    limit: u64,
}

impl Default for CellBudget {
    fn default() -> Self {
        Self::new(NODE_SCREEN_CELLS)
    }
}

impl CellBudget {
    /// A ledger of `limit` cells.
    pub fn new(limit: u64) -> Self {
        Self {
            used: Mutex::new(0),
            limit,
        }
    }

    /// Cells held by live sessions now.
    pub fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The budget.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Takes a checked size's cells from the budget, or says why not.
    pub fn reserve(self: &Arc<Self>, rows: u16, cols: u16) -> Result<Charge, SizeError> {
        let cells = check(rows, cols)?;
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if *used + cells > self.limit {
            return Err(SizeError::Budget {
                asked: cells,
                used: *used,
                limit: self.limit,
            });
        }
        *used += cells;
        Ok(Charge {
            budget: self.clone(),
            cells,
        })
    }

    /// Takes cells whatever the budget says: a session that already exists (re-adopted from a
    /// holder after a restart) is counted, never refused.
    pub fn adopt(self: &Arc<Self>, rows: u16, cols: u16) -> Charge {
        let cells = u64::from(rows.max(1)) * u64::from(cols.max(1));
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) += cells;
        Charge {
            budget: self.clone(),
            cells,
        }
    }
}

/// The cells one session holds; returned to the ledger when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<CellBudget>,
    cells: u64,
}

impl Charge {
    /// Moves this charge to a checked new size: all or nothing.
    pub fn resize(&mut self, rows: u16, cols: u16) -> Result<(), SizeError> {
        let cells = check(rows, cols)?;
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        let others = *used - self.cells;
        if cells > self.cells && others + cells > self.budget.limit {
            return Err(SizeError::Budget {
                asked: cells - self.cells,
                used: *used,
                limit: self.budget.limit,
            });
        }
        *used = others + cells;
        self.cells = cells;
        Ok(())
    }

    /// Cells held.
    pub fn cells(&self) -> u64 {
        self.cells
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(self.cells);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_budget_refuse_and_charges_return_their_cells() {
        assert_eq!(check(24, 80), Ok(1920));
        assert_eq!(check(1000, 1000), Ok(1_000_000));
        assert_eq!(check(0, 80).unwrap_err().code(), "size_limit");
        for (r, c) in [(1001, 10), (10, 1001), (4096, 4096)] {
            let e = check(r, c).unwrap_err();
            assert_eq!((e.code(), e.http_status()), ("size_limit", 400), "{r}x{c}");
        }
        let b = Arc::new(CellBudget::new(3_000));
        let mut a = b.reserve(24, 80).unwrap();
        assert_eq!(b.used(), 1920);
        // Over the node budget: refused, nothing taken.
        let e = b.reserve(24, 80).unwrap_err();
        assert_eq!((e.code(), e.http_status()), ("cell_budget", 503));
        assert_eq!(b.used(), 1920);
        // Growing past it is refused and keeps the old size; shrinking always works.
        assert_eq!(a.resize(50, 80).unwrap_err().code(), "cell_budget");
        assert_eq!((a.cells(), b.used()), (1920, 1920));
        a.resize(10, 10).unwrap();
        assert_eq!(b.used(), 100);
        let c = b.reserve(24, 80).unwrap();
        assert_eq!(b.used(), 2020);
        drop(a);
        drop(c);
        assert_eq!(b.used(), 0);
        // A re-adopted session counts even past the budget.
        let d = b.adopt(100, 100);
        assert_eq!(b.used(), 10_000);
        drop(d);
        assert_eq!(b.used(), 0);
    }
}
