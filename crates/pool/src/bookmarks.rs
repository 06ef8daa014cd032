//! # Bookmarks (`zfs bookmark`, `zfs destroy fs#name`)
//!
//! Facts (OpenZFS `dsl_bookmark.c`): a head dataset's bookmarks are the entries of one ZAP
//! (normalized like snapshot names, type `DMU_OTN_ZAP_METADATA`), named by the field
//! `com.delphix:bookmarks` of the zapified dataset object. An entry maps the bookmark's name
//! to a `zfs_bookmark_phys_t` as uint64s: guid, creation txg and creation time of the
//! snapshot it marks (`BOOKMARK_PHYS_SIZE_V1`, what OpenZFS writes unless a redaction list,
//! an IV set guid or the `bookmark_written` sizes need the longer V2 form). The
//! `bookmarks` feature counts the datasets that have such a ZAP: the first bookmark creates
//! it (and zapifies the dataset), the last one destroyed frees it. A bookmark holds no
//! blocks: it is the incremental source of a later send (`zfs send -i fs#name`).

use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use dsl::DS_FIELD_BOOKMARK_NAMES;
use zap::write::{ZapVal, U8_TEXTPREP_TOUPPER};

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(e.to_string())
}

impl PoolWriter {
    /// The bookmarks ZAP of head dataset `ds`, if it has one.
    fn bookmarks_obj(&mut self, ds: u64) -> Result<Option<u64>> {
        if !self.is_zapified(ds)? {
            return Ok(None);
        }
        self.mos_zaps.lookup_u64(&self.mos, ds, DS_FIELD_BOOKMARK_NAMES).map_err(bad)
    }

    /// Creates bookmark `name` of head dataset `ds` marking the snapshot (or bookmark) whose
    /// guid, creation txg and creation time are given.
    pub fn create_bookmark(&mut self, ds: u64, name: &str, guid: u64, txg: u64, time: u64) -> Result<()> {
        if self.feature_refcount("bookmarks")?.is_none() {
            return Err(PoolError::Unsupported(format!(
                "feature 'bookmarks' is not enabled on pool '{}' (rzpool set feature@bookmarks=enabled)",
                self.name
            )));
        }
        let obj = match self.bookmarks_obj(ds)? {
            Some(o) => o,
            None => {
                let o = self
                    .mos_zaps
                    .create_norm(&mut self.mos, crate::dsfeatures::OTN_ZAP_METADATA, U8_TEXTPREP_TOUPPER)
                    .map_err(bad)?;
                self.feature_adjust("bookmarks", 1)?;
                self.zapify(ds)?;
                self.mos_zaps
                    .update(&self.mos, ds, DS_FIELD_BOOKMARK_NAMES.as_bytes(), ZapVal::u64(o))
                    .map_err(bad)?;
                o
            }
        };
        if self.mos_zaps.lookup(&self.mos, obj, name.as_bytes()).map_err(bad)?.is_some() {
            return Err(PoolError::Exists(format!("bookmark '{name}' already exists")));
        }
        let v = ZapVal { int_size: 8, values: vec![guid, txg, time] };
        self.mos_zaps.update(&self.mos, obj, name.as_bytes(), v).map_err(bad)
    }

    /// Destroys bookmark `name` of head dataset `ds` (nothing if it has no such bookmark,
    /// as `zfs destroy` of a missing bookmark succeeds).
    pub fn destroy_bookmark(&mut self, ds: u64, name: &str) -> Result<()> {
        let Some(obj) = self.bookmarks_obj(ds)? else { return Ok(()) };
        if let Some(v) = self.mos_zaps.lookup(&self.mos, obj, name.as_bytes()).map_err(bad)? {
            if v.values.len() > 3 {
                return Err(PoolError::Unsupported(format!(
                    "bookmark '{name}' has the longer (bookmark_v2) form, which rzfs does not destroy yet"
                )));
            }
        }
        self.mos_zaps.remove(&self.mos, obj, name.as_bytes()).map_err(bad)?;
        if self.mos_zaps.entries(&self.mos, obj).map_err(bad)?.is_empty() {
            self.mos_zaps.destroy(&mut self.mos, obj).map_err(bad)?;
            self.mos_zaps.remove(&self.mos, ds, DS_FIELD_BOOKMARK_NAMES.as_bytes()).map_err(bad)?;
            self.feature_adjust("bookmarks", -1)?;
        }
        Ok(())
    }

    /// Bookmarks of head dataset `ds` created at or before txg `txg`: (name, whether it
    /// has the longer V2 form). A promote moves them with the snapshots.
    pub(crate) fn bookmarks_through(&mut self, ds: u64, txg: u64) -> Result<Vec<(String, bool)>> {
        let Some(obj) = self.bookmarks_obj(ds)? else { return Ok(Vec::new()) };
        let entries = self.mos_zaps.entries(&self.mos, obj).map_err(bad)?;
        Ok(entries
            .into_iter()
            .filter(|(_, v)| v.values.get(1).is_some_and(|&t| t <= txg))
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v.values.len() > 3))
            .collect())
    }

    /// Whether head dataset `ds` has bookmark `name`.
    pub(crate) fn has_bookmark(&mut self, ds: u64, name: &str) -> Result<bool> {
        let Some(obj) = self.bookmarks_obj(ds)? else { return Ok(false) };
        Ok(self.mos_zaps.lookup(&self.mos, obj, name.as_bytes()).map_err(bad)?.is_some())
    }

    /// Moves the (V1) bookmarks of head `from` created at or before `txg` to head `to`
    /// (`dsl_dataset_promote_sync`: they mark snapshots that move with a promote).
    pub(crate) fn move_bookmarks(&mut self, from: u64, to: u64, txg: u64) -> Result<()> {
        let Some(obj) = self.bookmarks_obj(from)? else { return Ok(()) };
        for (name, _) in self.bookmarks_through(from, txg)? {
            let Some(v) = self.mos_zaps.lookup(&self.mos, obj, name.as_bytes()).map_err(bad)? else {
                continue;
            };
            let [guid, ctxg, time] = v.values[..] else {
                return Err(PoolError::Unsupported(format!(
                    "bookmark '{name}' has the longer (bookmark_v2) form, which rzfs does not move yet"
                )));
            };
            self.destroy_bookmark(from, &name)?;
            self.create_bookmark(to, &name, guid, ctxg, time)?;
        }
        Ok(())
    }

    /// Frees the bookmarks of head dataset `ds`, which is being destroyed
    /// (`dsl_destroy_head_sync_impl`).
    pub(crate) fn release_bookmarks(&mut self, ds: u64) -> Result<()> {
        let Some(obj) = self.bookmarks_obj(ds)? else { return Ok(()) };
        let long = self
            .mos_zaps
            .entries(&self.mos, obj)
            .map_err(bad)?
            .iter()
            .filter(|(_, v)| v.values.len() > 3)
            .count();
        if long > 0 {
            self.feature_adjust("bookmark_v2", -(long as i64))?;
        }
        self.mos_zaps.destroy(&mut self.mos, obj).map_err(bad)?;
        self.feature_adjust("bookmarks", -1)
    }
}
