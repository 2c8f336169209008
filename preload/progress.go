package preload

import "strconv"

func (p *Preloader) setStatus(s Status) {
	p.mu.Lock()
	p.status = s
	p.mu.Unlock()
}

// initStatus fills the status and the metrics from a fresh plan.
func (p *Preloader) initStatus(plan *Plan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{State: StatePreloading, Reason: ReasonImporting}
	phases := map[string]int{PhasePending: 0, PhaseImporting: 0, PhaseImported: 0, PhaseSkipped: 0, PhaseFailed: 0}
	for _, s := range plan.Steps {
		a := ArchiveStatus{
			Name: s.Name(), Group: s.Group, Action: s.Action, Reason: s.Reason,
			ImagesTotal: len(s.Images), ImagesPresent: len(s.Images) - len(s.Missing),
			Missing: s.Missing, Phase: PhasePending, BytesTotal: -1,
		}
		if s.Action == ActionSkip {
			a.Phase = PhaseSkipped
		}
		phases[a.Phase]++
		st.ImagesTotal += a.ImagesTotal
		st.ImagesPresent += a.ImagesPresent
		st.Archives = append(st.Archives, a)
	}
	st.Message = "importing " + strconv.Itoa(len(plan.Imports())) + " of " + strconv.Itoa(len(plan.Steps)) + " archives"
	p.status = st
	for ph, n := range phases {
		p.m.archives.WithLabelValues(ph).Set(float64(n))
	}
	p.m.imagesTotal.Set(float64(st.ImagesTotal))
	p.m.imagesPresent.Set(float64(st.ImagesPresent))
}

func (p *Preloader) movePhase(a *ArchiveStatus, phase string) {
	p.m.archives.WithLabelValues(a.Phase).Dec()
	p.m.archives.WithLabelValues(phase).Inc()
	a.Phase = phase
}

func (p *Preloader) archiveStarted(i int, source string, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := &p.status.Archives[i]
	a.Source, a.Error = source, ""
	// A retried import reads the archive again from its start.
	p.status.BytesRead -= a.BytesRead
	a.BytesRead = 0
	if a.BytesTotal < 0 && size >= 0 {
		a.BytesTotal = size
		p.status.BytesTotal += size
		p.m.archiveSize.WithLabelValues(a.Name).Set(float64(size))
	}
	if a.Phase != PhaseImporting {
		p.movePhase(a, PhaseImporting)
	}
}

func (p *Preloader) archiveRead(i int, name string, n int) {
	p.m.archiveRead.WithLabelValues(name).Add(float64(n))
	p.m.read.Add(float64(n))
	p.mu.Lock()
	p.status.Archives[i].BytesRead += int64(n)
	p.status.BytesRead += int64(n)
	p.mu.Unlock()
}

// archiveImported counts the archive's missing images that the import created as present; the
// final check after all imports has the last word.
func (p *Preloader) archiveImported(i int, missing, created []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := &p.status.Archives[i]
	p.movePhase(a, PhaseImported)
	made := make(map[string]bool, len(created))
	for _, n := range created {
		made[n] = true
	}
	var still []string
	for _, ref := range missing {
		if !made[ref] {
			still = append(still, ref)
		}
	}
	gained := len(a.Missing) - len(still)
	a.Missing = still
	a.ImagesPresent += gained
	p.status.ImagesPresent += gained
	p.m.imagesPresent.Add(float64(gained))
}

func (p *Preloader) archiveFailed(i int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := &p.status.Archives[i]
	a.Error = err.Error()
	if a.Phase != PhaseFailed {
		p.movePhase(a, PhaseFailed)
	}
}

// recordMissing sets every archive's image counts from the final presence check.
func (p *Preloader) recordMissing(plan *Plan, missing []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gone := make(map[string]bool, len(missing))
	for _, ref := range missing {
		gone[ref] = true
	}
	present := 0
	for i, s := range plan.Steps {
		a := &p.status.Archives[i]
		a.Missing = nil
		for _, ref := range s.Images {
			if gone[ref] {
				a.Missing = append(a.Missing, ref)
			}
		}
		a.ImagesPresent = len(s.Images) - len(a.Missing)
		present += a.ImagesPresent
		if len(a.Missing) > 0 && a.Phase != PhaseFailed {
			a.Error = "listed images missing after import: " + summarize(a.Missing, 3)
			p.movePhase(a, PhaseFailed)
		}
	}
	p.status.ImagesPresent = present
	p.m.imagesPresent.Set(float64(present))
}

func (p *Preloader) finish(state State, reason, msg string) Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status.State, p.status.Reason, p.status.Message = state, reason, msg
	return p.status.clone()
}
