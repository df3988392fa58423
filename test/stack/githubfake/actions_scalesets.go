// The Actions service's admin calls: runner groups, scale sets, JIT runners and runner removal.

package githubfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type ssLabelJSON struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type ssStatsJSON struct {
	TotalAvailableJobs     int `json:"totalAvailableJobs"`
	TotalAcquiredJobs      int `json:"totalAcquiredJobs"`
	TotalAssignedJobs      int `json:"totalAssignedJobs"`
	TotalRunningJobs       int `json:"totalRunningJobs"`
	TotalRegisteredRunners int `json:"totalRegisteredRunners"`
	TotalBusyRunners       int `json:"totalBusyRunners"`
	TotalIdleRunners       int `json:"totalIdleRunners"`
}

type ssJSON struct {
	ID              int64         `json:"id"`
	Name            string        `json:"name"`
	RunnerGroupID   int64         `json:"runnerGroupId"`
	RunnerGroupName string        `json:"runnerGroupName"`
	Labels          []ssLabelJSON `json:"labels"`
	RunnerSetting   struct {
		DisableUpdate bool `json:"disableUpdate"`
	} `json:"RunnerSetting"`
	CreatedOn          time.Time    `json:"createdOn"`
	RunnerJitConfigURL string       `json:"runnerJitConfigUrl"`
	Statistics         *ssStatsJSON `json:"statistics"`
}

func (s *Server) ssJSONLocked(r *http.Request, st *actionsState, set *scaleSetRec) ssJSON {
	out := ssJSON{
		ID: set.id, Name: set.name, RunnerGroupID: set.groupID, RunnerGroupName: set.groupName, CreatedOn: set.created,
		RunnerJitConfigURL: fmt.Sprintf("%s_apis/runtime/runnerscalesets/%d/generatejitconfig", tenantURL(r), set.id),
	}
	for _, l := range set.labels {
		out.Labels = append(out.Labels, ssLabelJSON{Type: "System", Name: l})
	}
	out.RunnerSetting.DisableUpdate = set.disableUpdate
	stats := s.ssStatsLocked(st, set)
	out.Statistics = &stats
	return out
}

func (s *Server) ssStatsLocked(st *actionsState, set *scaleSetRec) ssStatsJSON {
	var out ssStatsJSON
	for _, j := range st.jobs {
		if j.set != set.id {
			continue
		}
		switch j.state {
		case ssAvailable:
			out.TotalAvailableJobs++
		case ssAcquired:
			out.TotalAcquiredJobs++
			out.TotalAssignedJobs++
		case ssRunning:
			out.TotalRunningJobs++
			out.TotalAssignedJobs++
		}
	}
	for rid, sid := range st.runnerSet {
		if rr, ok := s.runners[rid]; ok && sid == set.id {
			out.TotalRegisteredRunners++
			if rr.busy {
				out.TotalBusyRunners++
			} else {
				out.TotalIdleRunners++
			}
		}
	}
	return out
}

// groupsOfLocked lists the runner groups of a scope: an organisation's, or a repository's Default.
func (s *Server) groupsOfLocked(sc scope) []*groupRec {
	if sc.repo != "" {
		return []*groupRec{{id: 1, name: "Default", isDefault: true}}
	}
	return s.groupsLocked(sc.owner)
}

func (s *Server) ssListGroups(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	name := r.URL.Query().Get("groupName")
	type groupJSON struct {
		ID        int64  `json:"id"`
		Name      string `json:"name"`
		Size      int    `json:"size"`
		IsDefault bool   `json:"isDefaultGroup"`
	}
	out := []groupJSON{}
	for _, g := range s.groupsOfLocked(sc) {
		if name == "" || strings.EqualFold(g.name, name) {
			out = append(out, groupJSON{ID: g.id, Name: g.name, IsDefault: g.isDefault})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "value": out})
}

func (s *Server) ssList(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	q := r.URL.Query()
	group, _ := strconv.ParseInt(q.Get("runnerGroupId"), 10, 64)
	out := []ssJSON{}
	for _, set := range st.sets {
		if set.scope == sc && (group == 0 || set.groupID == group) && (q.Get("name") == "" || strings.EqualFold(set.name, q.Get("name"))) {
			out = append(out, s.ssJSONLocked(r, st, set))
		}
	}
	slices.SortFunc(out, func(a, b ssJSON) int { return int(a.ID - b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "value": out})
}

type ssWrite struct {
	Name          string        `json:"name"`
	RunnerGroupID int64         `json:"runnerGroupId"`
	Labels        []ssLabelJSON `json:"labels"`
	RunnerSetting *struct {
		DisableUpdate bool `json:"disableUpdate"`
	} `json:"RunnerSetting"`
}

// applyLocked checks a create or update body and applies it to set.
func (s *Server) ssApplyLocked(w http.ResponseWriter, st *actionsState, sc scope, set *scaleSetRec, in ssWrite) bool {
	if in.Name != "" {
		set.name = in.Name
	}
	if in.RunnerGroupID != 0 {
		set.groupID = in.RunnerGroupID
	}
	if in.RunnerSetting != nil {
		set.disableUpdate = in.RunnerSetting.DisableUpdate
	}
	if len(in.Labels) > 0 {
		set.labels = nil
		for _, l := range in.Labels {
			set.labels = append(set.labels, l.Name)
		}
	}
	i := slices.IndexFunc(s.groupsOfLocked(sc), func(g *groupRec) bool { return g.id == set.groupID })
	if strings.TrimSpace(set.name) == "" || len(set.labels) == 0 || i < 0 {
		actionsError(w, http.StatusBadRequest, "ArgumentException", "A scale set needs a name, labels and an existing runner group")
		return false
	}
	set.groupName = s.groupsOfLocked(sc)[i].name
	for _, o := range st.sets {
		if o.id != set.id && o.scope == sc && o.groupID == set.groupID && strings.EqualFold(o.name, set.name) {
			actionsError(w, http.StatusConflict, "RunnerScaleSetExistsException", fmt.Sprintf("A scale set named %s exists in the group", set.name))
			return false
		}
	}
	return true
}

func (s *Server) ssCreate(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	var in ssWrite
	if !readJSON(w, r, &in) {
		return
	}
	set := &scaleSetRec{id: s.newIDLocked(), scope: sc, groupID: max(in.RunnerGroupID, 1), created: s.now().UTC(), shape: st.shape}
	if !s.ssApplyLocked(w, st, sc, set, in) {
		return
	}
	st.sets[set.id] = set
	writeJSON(w, http.StatusOK, s.ssJSONLocked(r, st, set))
}

func (s *Server) ssGet(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	if set := s.setLocked(w, r, st, sc); set != nil {
		writeJSON(w, http.StatusOK, s.ssJSONLocked(r, st, set))
	}
}

func (s *Server) ssUpdate(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	set := s.setLocked(w, r, st, sc)
	var in ssWrite
	if set == nil || !readJSON(w, r, &in) {
		return
	}
	next := *set
	if !s.ssApplyLocked(w, st, sc, &next, in) {
		return
	}
	*set = next
	writeJSON(w, http.StatusOK, s.ssJSONLocked(r, st, set))
}

func (s *Server) ssDelete(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	if set := s.setLocked(w, r, st, sc); set != nil {
		delete(st.sets, set.id)
		s.broadcastLocked()
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) ssGenerateJIT(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	set := s.setLocked(w, r, st, sc)
	var in struct {
		Name       string `json:"name"`
		WorkFolder string `json:"workFolder"`
	}
	if set == nil || !readJSON(w, r, &in) {
		return
	}
	if strings.TrimSpace(in.Name) == "" {
		actionsError(w, http.StatusBadRequest, "ArgumentException", "name is required")
		return
	}
	if s.findRunnerByNameLocked(sc, in.Name) != nil {
		actionsError(w, http.StatusConflict, "AgentExistsException", fmt.Sprintf("A runner named %s already exists", in.Name))
		return
	}
	owner, repo := s.displayScopeLocked(sc.owner, sc.repo)
	rr := &runnerRec{
		id: s.newIDLocked(), name: in.Name, scope: sc, owner: owner, repo: repo, os: "Linux", arch: "X64",
		ephemeral: true, jit: true, jitSecret: randomString(32, alnum), groupID: set.groupID, created: s.now().UTC(),
	}
	addCustomLabels(rr, set.labels)
	s.runners[rr.id] = rr
	st.runnerSet[rr.id] = set.id
	s.recordMintLocked("jit", sc)
	blob, _ := json.Marshal(jitConfig{Kind: jitKind, RunnerID: rr.id, Name: rr.name, Scope: sc.String(), Secret: rr.jitSecret})
	writeJSON(w, http.StatusOK, map[string]any{
		"runner":           map[string]any{"id": rr.id, "name": rr.name, "runnerScaleSetId": set.id},
		"encodedJITConfig": base64.StdEncoding.EncodeToString(blob),
	})
}

func (s *Server) ssRemoveRunner(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	id, _ := pathInt(r, "rid")
	rr, ok := s.runners[id]
	switch {
	case !ok || rr.scope != sc:
		actionsError(w, http.StatusNotFound, "AgentNotFoundException", fmt.Sprintf("Runner %d not found", id))
	case rr.busy:
		actionsError(w, http.StatusBadRequest, "JobStillRunningException", fmt.Sprintf("Runner %d is running job %d", id, rr.jobID))
	default:
		s.deleteRunnerLocked(rr)
		w.WriteHeader(http.StatusNoContent)
	}
}
