// The one implementation of the resources stored as configuration items of the state table
// (runner classes, warm pools, scale sets): create, read (drift), update under optimistic
// concurrency, delete, import and the version plan modifier. Each resource keeps only its schema and
// the conversion between its model and its config type.
package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// itemModel is what a configuration resource's model provides: its key and version, and the
// conversion to and from its config type C.
type itemModel[C any] interface {
	// key is the table and the item's name.
	key() (table, name string)
	// storedVersion is the version the state holds.
	storedVersion() types.Int64
	toConfig(ctx context.Context) (C, diag.Diagnostics)
	// fromConfig sets the model from a stored item, keeping null for unset optional values.
	fromConfig(table string, c C, version int64)
}

// itemKind is how one kind of configuration item is stored.
type itemKind[C any] struct {
	what string // "warm pool", for messages
	get  func(r *declared.Repository, ctx context.Context, name string) (C, int64, error)
	put  func(r *declared.Repository, ctx context.Context, c C, expectVersion int64) (int64, error)
	del  func(r *declared.Repository, ctx context.Context, name string) error
}

// configItemResource implements Configure, Create, Read, Update, Delete and ImportState for model M
// (pointer PM) stored as config type C. Resources embed it.
type configItemResource[M any, C any, PM interface {
	*M
	itemModel[C]
}] struct {
	c    *clients
	kind itemKind[C]
}

func (r *configItemResource[M, C, PM]) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.c = providerData(req.ProviderData, &resp.Diagnostics)
}

func (r *configItemResource[M, C, PM]) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan M
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if !resp.Diagnostics.HasError() {
		// Version 0: the item must not exist yet.
		r.write(ctx, &plan, 0, &resp.State, &resp.Diagnostics)
	}
}

func (r *configItemResource[M, C, PM]) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state M
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	table, name := PM(&state).key()
	c, version, err := r.kind.get(r.c.repo(table), ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		// Deleted out of band (or its table is gone): forget it, so the next plan re-creates it.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Cannot read the "+r.kind.what,
			fmt.Sprintf("Reading %s %q from table %s failed. If the stored item is invalid, fix or delete it in the table.", r.kind.what, name, table), err)
		return
	}
	PM(&state).fromConfig(table, c, version)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *configItemResource[M, C, PM]) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state M
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if !resp.Diagnostics.HasError() {
		// The stored version must still be the one in state: a concurrent change is a conflict, not
		// silently overwritten.
		r.write(ctx, &plan, PM(&state).storedVersion().ValueInt64(), &resp.State, &resp.Diagnostics)
	}
}

// write stores the planned item if its stored version is expectVersion, and sets the state.
func (r *configItemResource[M, C, PM]) write(ctx context.Context, plan *M, expectVersion int64, state *tfsdk.State, diags *diag.Diagnostics) {
	c, d := PM(plan).toConfig(ctx)
	diags.Append(d...)
	if diags.HasError() {
		return
	}
	table, name := PM(plan).key()
	version, err := r.kind.put(r.c.repo(table), ctx, c, expectVersion)
	if err != nil {
		configWriteError(diags, r.kind.what, table, name, err)
		return
	}
	PM(plan).fromConfig(table, c, version)
	diags.Append(state.Set(ctx, plan)...)
}

func (r *configItemResource[M, C, PM]) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state M
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	table, name := PM(&state).key()
	err := r.kind.del(r.c.repo(table), ctx, name)
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound):
	case errors.Is(err, declared.ErrInUse):
		addError(&resp.Diagnostics, "The "+r.kind.what+" is in use",
			fmt.Sprintf("The %s %q in table %s is still named by other items; destroy or move them first.", r.kind.what, name, table), err)
	default:
		addError(&resp.Diagnostics, "Cannot delete the "+r.kind.what, fmt.Sprintf("Deleting %s %q from table %s failed.", r.kind.what, name, table), err)
	}
}

// ImportState imports "<table>/<name>".
func (r *configItemResource[M, C, PM]) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	m := importIDRE.FindStringSubmatch(req.ID)
	if m == nil {
		resp.Diagnostics.AddError("Invalid import id",
			fmt.Sprintf("Import a configuration item as <table>/<name>, for example runnerpool-prod/small-x64; got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("table"), m[1])...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), m[2])...)
}

// ModifyPlan is the plan modifier every configuration item shares; a resource with plan checks of
// its own calls it first from its ModifyPlan.
func (r *configItemResource[M, C, PM]) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	r.keepStoredVersion(ctx, req, resp)
}

// keepStoredVersion keeps the stored version when nothing else changes. Terraform marks the
// computed version unknown as soon as the configuration differs from the state, before
// durationByValue finds that "90m" is the state's "1h30m": without this, a spelling would plan an
// update.
func (r *configItemResource[M, C, PM]) keepStoredVersion(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	var state, plan M
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !PM(&plan).storedVersion().IsUnknown() {
		return
	}
	if sameValuesExcept(plan, state, "Version") {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("version"), PM(&state).storedVersion())...)
	}
}

var importIDRE = regexp.MustCompile(`^([A-Za-z0-9_.-]{3,255})/([a-z0-9][a-z0-9_-]{0,62})$`)

// configWriteError explains a failed configuration write.
func configWriteError(diags *diag.Diagnostics, kind, table, name string, err error) {
	switch {
	case errors.Is(err, store.ErrNoTable):
		addError(diags, "State table not found", fmt.Sprintf("Table %s does not exist (yet); create it with runnerpool_state_table and reference its name.", table), err)
	case errors.Is(err, declared.ErrUnknownRunnerClass):
		diags.AddAttributeError(path.Root("runner_class"), "Unknown runner class",
			fmt.Sprintf("The %s %q names a runner class that is not in table %s. Create it first (reference runnerpool_runner_class.<name>.name so Terraform orders the two).\n\nOriginal Error: %s",
				kind, name, table, err))
	case errors.Is(err, declared.ErrUnknownWarmPool):
		diags.AddAttributeError(path.Root("warm_pool"), "Unknown warm pool",
			fmt.Sprintf("The %s %q names a warm pool that is not in table %s. Create it first (reference runnerpool_warm_pool.<name>.name so Terraform orders the two).\n\nOriginal Error: %s",
				kind, name, table, err))
	case errors.Is(err, store.ErrConflict):
		addError(diags, "Configuration item changed concurrently",
			fmt.Sprintf("The %s %q in table %s exists already, or was changed since Terraform last read it. Run terraform apply -refresh-only "+
				"(or import it, if Terraform does not manage it yet) and apply again.", kind, name, table), err)
	case errors.Is(err, store.ErrNotFound):
		addError(diags, "State table not found", fmt.Sprintf("Table %s does not exist (yet); create it with runnerpool_state_table and reference its name.", table), err)
	default:
		addError(diags, "Cannot write the "+kind, fmt.Sprintf("Writing %s %q to table %s failed.", kind, name, table), err)
	}
}

// keyOf is the key() of the models: their Table and Name attributes.
func keyOf(table, name types.String) (string, string) { return table.ValueString(), name.ValueString() }
