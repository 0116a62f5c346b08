# MigOperatorNode moves here from quotas (quotas 0006 drops it from that app's state only).
# The state takes the existing table, quotas_migoperatornode, as it is: no table is created,
# renamed or copied. The content type follows, so permissions granted on it are kept.

import django.db.models.deletion
from django.db import migrations, models


def move_content_type(apps, schema_editor):
    content_type = apps.get_model('contenttypes', 'ContentType')
    if content_type.objects.filter(app_label='gpu_agent', model='migoperatornode').exists():
        return
    content_type.objects.filter(app_label='quotas', model='migoperatornode').update(
        app_label='gpu_agent'
    )


def restore_content_type(apps, schema_editor):
    content_type = apps.get_model('contenttypes', 'ContentType')
    if content_type.objects.filter(app_label='quotas', model='migoperatornode').exists():
        return
    content_type.objects.filter(app_label='gpu_agent', model='migoperatornode').update(
        app_label='quotas'
    )


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('gpu_agent', '0002_probes_proposals_device_plugin'),
        ('quotas', '0006_migoperatornode_moves_to_gpu_agent'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='MigOperatorNode',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('node_name', models.CharField(max_length=253)),
                        ('desired_config', models.CharField(blank=True, max_length=253)),
                        ('label_config', models.CharField(blank=True, help_text='nvidia.com/mig.config as read.', max_length=253)),
                        ('label_state', models.CharField(blank=True, help_text='nvidia.com/mig.config.state as read.', max_length=63)),
                        ('present', models.BooleanField(default=True, help_text='The Node exists in the cluster (the portal never creates one).')),
                        ('message', models.TextField(blank=True)),
                        ('label_set_at', models.DateTimeField(blank=True, null=True)),
                        ('observed_at', models.DateTimeField(blank=True, null=True)),
                        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='mig_nodes', to='quotas.cluster')),
                    ],
                    options={
                        'db_table': 'quotas_migoperatornode',
                        'ordering': ['cluster__name', 'node_name'],
                        'constraints': [models.UniqueConstraint(fields=('cluster', 'node_name'), name='mig_operator_node_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
