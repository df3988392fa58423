// Phase 3: the orphan sweep. An instance launched by this deployment (it carries the deployment
// tag) that has no live record is an orphan: a crash between CreateFleet and writing the records, a
// record terminated while TerminateInstances failed, a record lost. Nothing may run unseen (DESIGN
// rule 2): the sweep terminates it. Instances without this deployment's tag are never touched,
// whatever else they carry.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
)

type taggedInstance struct {
	id       string
	state    types.InstanceStateName
	launched time.Time // zero when EC2 did not say
}

// orphans runs the sweep and returns the ids of this deployment's instances that have no live
// record and that it terminated: phase 4 treats their runners as leftovers.
//
// EC2 is read in two steps, so a pass costs what the orphans cost rather than what the deployment
// holds: DescribeTags lists the ids carrying the deployment tag (a few dozen bytes each, where a
// DescribeInstances document is some kilobytes), and DescribeInstances is asked only about the ids
// without a live record, for their state and launch time. An instance EC2 reports terminated is
// remembered and not asked about again while its tag is still listed.
func (r *Refresher) orphans(ctx context.Context, p *pass) map[string]bool {
	tagged, ok := r.listTaggedAndLive(ctx, p)
	if !ok {
		return nil
	}
	suspects, ok := r.orphanSuspects(ctx, p, tagged)
	if !ok {
		return nil
	}
	orphans := r.confirmOrphans(ctx, p, suspects)
	if len(orphans) == 0 {
		return nil
	}
	slices.Sort(orphans)
	r.log.InfoContext(ctx, "refresh: terminating orphans", "deployment", r.opts.DeploymentID, "instances", orphans)
	return r.terminateOrphans(ctx, p, orphans)
}

// listTaggedAndLive lists the ids of the instances carrying the deployment tag and the table's live
// records, which it keeps in the pass (p.live) and its report. ok is false when either listing
// failed (the sweep is skipped).
func (r *Refresher) listTaggedAndLive(ctx context.Context, p *pass) (tagged []string, ok bool) {
	// EC2's tags and the table's live records are listed at once. A record written after its
	// listing makes its instance a suspect at worst: the grace period protects a young instance,
	// and every suspect is confirmed with a consistent read of its record below.
	// Brief records: this phase and the pool check read ids, states, runs, thresholds, pool marks,
	// versions and runner classes of the listing; what they act on they read again in full.
	var live []store.Instance
	var tagErr, liveErr error
	var wg sync.WaitGroup
	wg.Go(func() { tagged, tagErr = r.taggedIDs(ctx) })
	wg.Go(func() { live, liveErr = r.st.LiveBrief(ctx) })
	wg.Wait()
	if tagErr != nil {
		p.fail(PhaseOrphans, fmt.Errorf("listing instances tagged %s=%s: %w", tags.Deployment, r.opts.DeploymentID, tagErr))
		return nil, false
	}
	if liveErr != nil {
		p.fail(PhaseOrphans, fmt.Errorf("listing live records (sweep skipped: without them every instance looks orphaned): %w", liveErr))
		return nil, false
	}
	liveIDs := make(map[string]store.Instance, len(live))
	for _, rec := range live {
		liveIDs[rec.ID] = rec
	}
	p.live = liveIDs
	p.update(func(rep *Report) { rep.Listing = live })
	return tagged, true
}

// orphanSuspects is what EC2 says of the tagged instances without a live record: those past the
// grace period are suspects; terminated ones are remembered, young or undescribed ones reported.
// It counts the tagged instances that are not terminated. ok is false when EC2 could not be asked
// (the sweep is skipped).
func (r *Refresher) orphanSuspects(ctx context.Context, p *pass, tagged []string) (suspects []taggedInstance, ok bool) {
	recorded, unrecorded := 0, []string{}
	for _, id := range tagged {
		switch {
		case p.live[id].ID != "":
			recorded++
		case !r.knownTerminated(id):
			unrecorded = append(unrecorded, id)
		}
	}
	r.forgetTerminated(tagged)
	described, err := r.describeUnrecorded(ctx, unrecorded)
	if err != nil {
		p.fail(PhaseOrphans, fmt.Errorf("describing %d tagged instances without a record (sweep skipped): %w", len(unrecorded), err))
		return nil, false
	}
	for _, id := range unrecorded {
		in, ok := described[id]
		switch {
		case ok && in.state == types.InstanceStateNameTerminated:
			r.rememberTerminated(id)
			continue
		case ok && in.state == types.InstanceStateNameShuttingDown:
			continue
		case ok && !in.launched.IsZero() && p.now.Sub(in.launched) >= r.opts.OrphanGrace:
			suspects = append(suspects, in)
		default:
			// Launched within the grace period, or not described yet (EC2's reads are eventually
			// consistent: a new instance's tag may be listed before the instance is).
			p.update(func(rep *Report) { rep.Orphans.Young = append(rep.Orphans.Young, id) })
		}
		if ok {
			recorded++ // counted in Tagged: a listed instance that is not terminated
		}
	}
	p.update(func(rep *Report) { rep.Orphans.Tagged = recorded })
	return suspects, true
}

// confirmOrphans is the suspects that are orphans: the listing reads indexes, which lag behind
// writes, so each suspect is confirmed with a consistent read of its record.
func (r *Refresher) confirmOrphans(ctx context.Context, p *pass, suspects []taggedInstance) []string {
	var orphans []string
	forEach(r.opts.Concurrency, suspects, func(in taggedInstance) {
		rec, err := r.st.Get(ctx, in.id)
		switch {
		case err == nil && rec.State.Live():
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			p.fail(PhaseOrphans, fmt.Errorf("confirming orphan %s (left running): %w", in.id, err))
			return
		}
		p.update(func(*Report) { orphans = append(orphans, in.id) })
	})
	return orphans
}

// terminateOrphans terminates the orphans and returns the ids terminated here.
//
// An orphan whose TerminateInstances answers InvalidInstanceID.NotFound is not among them. The
// sweep listed it a moment ago, running and past the grace period: EC2's NotFound then is its
// eventual consistency (the call reached a part of EC2 that does not show the instance yet), and
// the EC2 guide says it "does not mean the instance was or will be terminated" (see package
// terminate). Such an orphan is reported Unseen and its runner is no leftover; the next sweep
// lists it again and asks again. One EC2 has really forgotten is no longer listed then.
func (r *Refresher) terminateOrphans(ctx context.Context, p *pass, orphans []string) map[string]bool {
	res := terminate.Batches(ctx, r.ec2, orphans, r.opts.BatchSize)
	for _, err := range res.Errs {
		p.fail(PhaseOrphans, err)
	}
	if len(res.Gone) > 0 {
		r.log.WarnContext(ctx, "refresh: EC2 answered NotFound for orphans it just listed: left for the next sweep", "instances", res.Gone)
	}
	dead := map[string]bool{}
	for _, id := range res.Done {
		dead[id] = true
	}
	p.update(func(rep *Report) {
		rep.Orphans.TerminateCalls += res.Calls
		rep.Orphans.Terminated = append(rep.Orphans.Terminated, res.Done...)
		rep.Orphans.Unseen = append(rep.Orphans.Unseen, res.Gone...)
	})
	return dead
}

// taggedIDs lists the ids of the instances carrying this deployment's tag (DescribeTags, all
// pages of 1,000; terminated instances may still be listed).
func (r *Refresher) taggedIDs(ctx context.Context) ([]string, error) {
	pg := ec2.NewDescribeTagsPaginator(r.ec2, &ec2.DescribeTagsInput{
		Filters: []types.Filter{
			{Name: aws.String("resource-type"), Values: []string{"instance"}},
			{Name: aws.String("key"), Values: []string{tags.Deployment}},
			{Name: aws.String("value"), Values: []string{r.opts.DeploymentID}},
		},
		MaxResults: aws.Int32(1000),
	})
	var out []string
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range page.Tags {
			// EC2 filter values are patterns ('*' and '?' match): check the tag exactly, so a
			// deployment id with wildcard characters can never reach another deployment.
			if t.ResourceType == types.ResourceTypeInstance && aws.ToString(t.Key) == tags.Deployment && aws.ToString(t.Value) == r.opts.DeploymentID {
				out = append(out, aws.ToString(t.ResourceId))
			}
		}
	}
	return out, nil
}

// describeFilterValues is the most values one DescribeInstances filter carries.
const describeFilterValues = 200

// describeUnrecorded describes the given instances (those of them EC2 knows) that carry this
// deployment's tag, checked again on the instance itself.
func (r *Refresher) describeUnrecorded(ctx context.Context, ids []string) (map[string]taggedInstance, error) {
	out := map[string]taggedInstance{}
	for chunk := range slices.Chunk(ids, describeFilterValues) {
		pg := ec2.NewDescribeInstancesPaginator(r.ec2, &ec2.DescribeInstancesInput{
			Filters: []types.Filter{
				{Name: aws.String("instance-id"), Values: chunk},
				{Name: aws.String("tag:" + tags.Deployment), Values: []string{r.opts.DeploymentID}},
			},
			MaxResults: aws.Int32(1000),
		})
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				return nil, err
			}
			for _, res := range page.Reservations {
				for _, in := range res.Instances {
					if !hasTag(in.Tags, tags.Deployment, r.opts.DeploymentID) {
						continue
					}
					id := aws.ToString(in.InstanceId)
					ti := taggedInstance{id: id, launched: aws.ToTime(in.LaunchTime)}
					if in.State != nil {
						ti.state = in.State.Name
					}
					out[id] = ti
				}
			}
		}
	}
	return out, nil
}

// knownTerminated reports whether an earlier pass saw the instance terminated.
func (r *Refresher) knownTerminated(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.terminated[id]
}

func (r *Refresher) rememberTerminated(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.terminated == nil {
		r.terminated = map[string]bool{}
	}
	r.terminated[id] = true
}

// forgetTerminated keeps only the remembered instances whose tag is still listed.
func (r *Refresher) forgetTerminated(tagged []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.terminated) == 0 {
		return
	}
	listed := make(map[string]bool, len(tagged))
	for _, id := range tagged {
		listed[id] = true
	}
	maps.DeleteFunc(r.terminated, func(id string, _ bool) bool { return !listed[id] })
}

func hasTag(ts []types.Tag, key, value string) bool {
	for _, t := range ts {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value) == value
		}
	}
	return false
}
