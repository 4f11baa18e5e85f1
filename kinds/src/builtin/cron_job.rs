//! `batch/v1` CronJob: Jobs made from a template on a cron schedule.

use super::prelude::*;
use api::batch::v1::CronJob as Typed;

/// `batch/v1` CronJob.
pub struct CronJob;

/// Its names, scope, verbs and subresources.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "batch",
    version: "v1",
    kind: "CronJob",
    plural: "cronjobs",
    singular: "cronjob",
    short_names: &["cj"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("batch", "v1", "CronJob")],
    categories: &["all"],
    selectable_fields: &[],
};

impl Kind for CronJob {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Typed>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Typed>(generator))
    }

    /// kubectl's columns: the schedule, its time zone, whether it is suspended, how many of its
    /// Jobs run, when it last made one; wide adds the template's containers and selector.
    fn columns(&self) -> Vec<Column> {
        vec![
            table::NAME,
            table::col(
                "Schedule",
                "string",
                "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            ),
            table::col(
                "Timezone",
                "string",
                "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
            ),
            table::col(
                "Suspend",
                "boolean",
                "This flag tells the controller to suspend subsequent executions.",
            ),
            table::col(
                "Active",
                "integer",
                "A list of pointers to currently running jobs.",
            ),
            table::col(
                "Last Schedule",
                "string",
                "Information when was the last time the job was successfully scheduled.",
            ),
            table::AGE,
            table::CONTAINERS,
            table::IMAGES,
            table::wide(
                "Selector",
                "string",
                "A label query over pods that should match the pod count.",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let cron_job: Typed = table::typed(object)?;
        let spec = cron_job.spec.clone().unwrap_or_default();
        let status = cron_job.status.clone().unwrap_or_default();
        let job = spec.job_template.spec.clone().unwrap_or_default();
        let containers = job.template.spec.map(|s| s.containers).unwrap_or_default();
        let (names, images) = table::container_cells(&containers);
        let last_schedule = match &status.last_schedule_time {
            Some(t) => table::since(Some(t), now),
            None => "<none>".to_string(),
        };
        let suspend = match spec.suspend {
            Some(true) => "True",
            Some(false) => "False",
            None => "<unset>",
        };
        Some(vec![
            table::name(&cron_job.metadata),
            json!(spec.schedule),
            json!(table::or_none(spec.time_zone.as_deref())),
            json!(suspend),
            json!(status.active.as_ref().map_or(0, Vec::len)),
            json!(last_schedule),
            table::age(&cron_job.metadata, now),
            names,
            images,
            json!(table::or_none(
                job.selector.as_ref().map(table::format_selector).as_deref()
            )),
        ])
    }

    fn default(&self, object: &mut Value) {
        defaults::cron_job(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::batch::validate_cron_job(new, old)
    }
}
